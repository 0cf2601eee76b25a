"""Rule 12 (secrets are references), finding by finding: where each points and what it says."""

from __future__ import annotations

from typing import Any

from specs.models import DeploymentSpec
from specs.rules import R12, check_secrets
from tests.specs_factory import deployment


def findings(**spec: Any) -> list[tuple[tuple[str | int, ...], str]]:
    doc = deployment("vlm", "rtvi-emulator@sha256:" + "ab" * 32, 18000, **spec)
    found = list(check_secrets(DeploymentSpec.model_validate(doc["spec"])))
    assert all(f.rule == R12 and f.severity == "error" for f in found)
    return [(f.path, f.message) for f in found]


def test_good_references_raise_nothing() -> None:
    assert findings(secrets=[{"name": "HF_TOKEN", "fromEnv": "HF"},
                             {"name": "API", "fromFile": "/run/secrets/api"}],
                    env={"PLAIN": "1"}, apiTokenSecret="API") == []


def test_every_rule_12_finding_points_at_its_field_and_says_why() -> None:
    assert findings(
        secrets=[{"name": "A"}, {"name": "A", "fromEnv": "E", "fromFile": "/p"},
                 {"name": "VLLM_IGNORE_EOS", "fromEnv": "E"}],
        env={"A": "1", "MY_TOKEN": "x"}, apiTokenSecret="T") == [
        (("secrets", 0), "give exactly one of fromEnv or fromFile"),
        (("env", "A"), "A is a secret reference; it must not also be a plain env value"),
        (("secrets", 1), "give exactly one of fromEnv or fromFile"),
        (("secrets", 1, "name"), "secret A is listed twice"),
        (("env", "A"), "A is a secret reference; it must not also be a plain env value"),
        (("secrets", 2, "name"), "VLLM_IGNORE_EOS is checked by the Deployment rules, so its "
         "value must be visible in the spec; set it in spec.env or spec.model, not as a secret"),
        (("apiTokenSecret",), "names no entry of spec.secrets (A, VLLM_IGNORE_EOS); the token "
         "is a secret reference like any other"),
        (("env", "MY_TOKEN"), "MY_TOKEN looks like a secret; pass it with spec.secrets "
         "(fromEnv or fromFile), never as a plain value"),
    ]


def test_a_token_secret_with_no_secrets_at_all_says_so() -> None:
    assert findings(apiTokenSecret="T") == [
        (("apiTokenSecret",), "names no entry of spec.secrets (there are none); the token is a "
         "secret reference like any other")]


def test_a_secret_named_like_one_is_fine_when_it_is_a_reference() -> None:
    assert findings(secrets=[{"name": "MY_TOKEN", "fromEnv": "T"}]) == []
