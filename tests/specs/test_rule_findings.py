"""Deployment rules 1-10, finding by finding: which field each points at, what it says, which
rule it cites and how severe it is. These messages are what ``validate`` and ``plan`` show a
person; a changed word, path or severity is a changed product, so each is pinned exactly.
(Rule 12 is in ``test_secret_rules.py``; whole-file cases in ``test_bad_input.py``.)"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from specs.models import DeploymentSpec
from specs.rules import (
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
    R12,
    R_MODEL_VARS,
    R_NETWORK,
    Check,
    check_eager,
    check_evs,
    check_gpus,
    check_image,
    check_model,
    check_network,
    check_no_drop,
    check_perf,
    check_remote_code,
    covering_mount,
)
from tests.specs_factory import deployment

DIGEST = "rtvi-emulator@sha256:" + "ab" * 32
NGC = "ngc:nim/nvidia/test-model:1.0"
Found = tuple[tuple[str | int, ...], str, str, str]


def spec_of(**spec: Any) -> DeploymentSpec:
    doc = deployment("vlm", DIGEST, 18000)
    doc["spec"].update(spec)
    return DeploymentSpec.model_validate(doc["spec"])


def findings(check: Check, **spec: Any) -> list[Found]:
    return [(f.path, f.message, f.rule, f.severity) for f in check(spec_of(**spec))]


def model(**fields: Any) -> dict[str, Any]:
    return {"model": fields}


# --- rule 1 -------------------------------------------------------------------------------------

def test_an_image_is_pinned_by_digest_except_when_exploring() -> None:
    assert findings(check_image) == []
    tag = "rtvi-emulator:latest"
    assert findings(check_image, image=tag) == [
        (("image",), f"{tag!r} is not pinned by digest (want name@sha256:<64 lowercase hex>); "
         "only profile exploration may use a tag", R1, "error")]
    assert findings(check_image, image="x@sha256:" + "AB" * 32)[0][0] == ("image",)
    assert findings(check_image, image=tag, profile="exploration") == []


# --- rules 2-4: the model -----------------------------------------------------------------------

def test_model_variables_come_from_spec_model_not_env() -> None:
    assert findings(check_model, env={"MODEL_PATH": NGC, "VLM_MODEL_TO_USE": "x",
                                      "MODEL_IMPLEMENTATION_PATH": "/m", "OTHER": "1"}) == [
        (("env", "VLM_MODEL_TO_USE"), "set VLM_MODEL_TO_USE through spec.model, not env",
         R_MODEL_VARS, "error"),
        (("env", "MODEL_PATH"), "set MODEL_PATH through spec.model, not env", R_MODEL_VARS,
         "error"),
        (("env", "MODEL_IMPLEMENTATION_PATH"), "set MODEL_IMPLEMENTATION_PATH through "
         "spec.model, not env", R_MODEL_VARS, "error")]


def test_a_preset_is_whole_or_refused() -> None:
    preset = "cr3-nano-reasoner-fp8"
    path = "ngc:nim/nvidia/cosmos3-nano-reasoner:modelopt-fp8-final_format_fix"
    assert findings(check_model, **model(preset=preset)) == []
    assert findings(check_model, **model(preset=preset, use="cosmos-reason3", path=path)) == []
    said = (("model", "preset"), f"preset {preset} means use=cosmos-reason3 path={path}; remove "
            "the conflicting use/path", R3, "error")
    assert findings(check_model, **model(preset=preset, use="other")) == [said]
    assert findings(check_model, **model(preset=preset, path=NGC)) == [said]
    # A preset's path is not judged again (it is ours, not the person's).
    assert findings(check_model, **model(preset=preset, use="other",
                                         path="HF_TOKEN")) == [said]


def test_use_and_path_are_both_needed() -> None:
    assert findings(check_model, **model()) == [
        (("model",), "set model.preset or model.use (VLM_MODEL_TO_USE)", R3, "error"),
        (("model",), "set model.path (MODEL_PATH)", R2, "error")]
    assert findings(check_model, **model(path=NGC)) == [
        (("model",), "set model.preset or model.use (VLM_MODEL_TO_USE)", R3, "error")]
    assert findings(check_model, **model(use="vllm-compatible")) == [
        (("model",), "set model.path (MODEL_PATH)", R2, "error")]


def test_a_custom_model_needs_an_absolute_implementation_path() -> None:
    assert findings(check_model, **model(use="custom")) == [
        (("model",), "VLM_MODEL_TO_USE=custom needs model.implementationPath "
         "(MODEL_IMPLEMENTATION_PATH)", R4, "error")]
    assert findings(check_model, **model(use="custom", implementationPath="rel/impl")) == [
        (("model", "implementationPath"), "a path inside the container: must be an absolute "
         "path (starting with /)", R4,
         "error")]
    assert findings(check_model, **model(use="custom", implementationPath="/opt/impl")) == []
    # A custom model may also name a path; it is judged like any other.
    assert findings(check_model, **model(use="custom", implementationPath="/opt/impl",
                                         path="bad path")) == [
        (("model", "path"), "'bad path' is not ngc:<org>/<team>/<model>:<version>, an absolute "
         "mounted path, or git:https://…", R2, "error")]


CREDENTIALS = ("MODEL_PATH must not carry credentials or variable expansions; pass HF_TOKEN as "
               "a secret reference")


@pytest.mark.parametrize("path", [
    "ngc:nim/HF_TOKEN/m:1", "/models/$USER/m", "git:https://user:pw@host/repo",
    "ngc:nim/nvidia/hf_abcdefghijklmnop1234:1", "https://u@x/y"])
def test_a_model_path_never_carries_credentials(path: str) -> None:
    assert findings(check_model, **model(use="vllm-compatible", path=path)) == [
        (("model", "path"), CREDENTIALS, R12, "error")]


def test_a_short_hf_like_word_is_not_a_token() -> None:
    assert findings(check_model, **model(use="u", path="ngc:nim/nvidia/hf_short:1")) == []


def test_git_sources_only_when_exploring_and_only_over_https() -> None:
    repo = "git:https://example.com/models/m.git"
    assert findings(check_model, **model(use="u", path=repo)) == [
        (("model", "path"), "git: model sources are not revision-pinned; allowed only with "
         "profile: exploration (use a mounted, revision-pinned snapshot)", R2, "error")]
    assert findings(check_model, profile="exploration", **model(use="u", path=repo)) == []
    assert findings(check_model, profile="exploration",
                    **model(use="u", path="git:ssh://example.com/m")) == [
        (("model", "path"), "git: model paths must be git:https://…", R2, "error")]


def test_an_absolute_model_path_is_a_read_only_mount() -> None:
    path = "/models/m"
    assert findings(check_model, **model(use="u", path=path)) == [
        (("model", "path"), f"absolute MODEL_PATH {path} must be bind-mounted read-only: add a "
         "spec.mounts entry whose target contains it", R2, "error")]
    mounts: list[dict[str, object]] = [
        {"source": "/srv/a", "target": "/data"},
        {"source": "/srv/m", "target": "/models", "readOnly": False}]
    assert findings(check_model, mounts=mounts, **model(use="u", path=path)) == [
        (("mounts", 1, "readOnly"), f"the mount holding MODEL_PATH {path} must be read-only",
         R2, "error")]
    mounts[1]["readOnly"] = True
    assert findings(check_model, mounts=mounts, **model(use="u", path=path)) == []


@pytest.mark.parametrize("path", ["ngc:nim/nvidia/m", "ngc:a/b:1", "ngc:a/b/c/d:1",
                                  "ngc:a/b/c:1/2", "ngc:a b/c/d:1", "nim/nvidia/m:1"])
def test_anything_else_is_not_a_model_path(path: str) -> None:
    assert findings(check_model, **model(use="u", path=path)) == [
        (("model", "path"), f"{path!r} is not ngc:<org>/<team>/<model>:<version>, an absolute "
         "mounted path, or git:https://…", R2, "error")]


def test_the_deepest_mount_covers_a_path() -> None:
    spec = spec_of(mounts=[{"source": "/a", "target": "/opt"},
                           {"source": "/b", "target": "/models"},
                           {"source": "/c", "target": "/models/big"},
                           {"source": "/d", "target": "/modelsx"}])
    assert covering_mount(spec, "/models/big/w") is spec.mounts[2]
    assert covering_mount(spec, "/models/big") is spec.mounts[2]
    assert covering_mount(spec, "/models/small") is spec.mounts[1]
    assert covering_mount(spec, "/models") is spec.mounts[1]
    assert covering_mount(spec, "/modelsy") is None
    assert covering_mount(spec, "/opt/x") is spec.mounts[0]
    assert covering_mount(spec_of(mounts=[{"source": "/b", "target": "/models"}]),
                          "/modelsx/y") is None
    # A target ending in a letter that a wrong strip would eat is still its own folder.
    spec = spec_of(mounts=[{"source": "/x", "target": "/modelsX"}])
    assert covering_mount(spec, "/modelsX/w") is spec.mounts[0]
    # Of two mounts on one target, the first wins (as Docker would refuse the second anyway).
    twice = spec_of(mounts=[{"source": "/a", "target": "/m"}, {"source": "/b", "target": "/m"}])
    assert covering_mount(twice, "/m/w") is twice.mounts[0]


# --- rule 5 -------------------------------------------------------------------------------------

def test_remote_code_needs_an_exact_allowlist_entry() -> None:
    said = [(("env", "VLM_TRUST_REMOTE_CODE"), "trusting remote code needs an exact "
             f"RTVI_MODEL_PATH_ALLOWLIST entry for MODEL_PATH {NGC!r}", R5, "error")]
    assert findings(check_remote_code, env={"VLM_TRUST_REMOTE_CODE": "true"}) == said
    assert findings(check_remote_code, env={"VLM_TRUST_REMOTE_CODE": "True",
                                            "RTVI_MODEL_PATH_ALLOWLIST": NGC + "x"}) == said
    assert findings(check_remote_code, env={"VLM_TRUST_REMOTE_CODE": "1",
                                            "RTVI_MODEL_PATH_ALLOWLIST": f"a, {NGC} ,b"}) == []
    assert findings(check_remote_code, env={"VLM_TRUST_REMOTE_CODE": "1",
                                            "RTVI_MODEL_PATH_ALLOWLIST": f"x,{NGC}"}) == []
    assert findings(check_remote_code, env={"VLM_TRUST_REMOTE_CODE": "false"}) == []
    assert findings(check_remote_code, env={"VLM_TRUST_REMOTE_CODE": "true"},
                    **model(use="custom", implementationPath="/i")) == [
        (("env", "VLM_TRUST_REMOTE_CODE"), "trusting remote code needs an exact "
         "RTVI_MODEL_PATH_ALLOWLIST entry for MODEL_PATH None", R5, "error")]


def test_unsafe_model_config_needs_a_written_review() -> None:
    said = [(("env", "RTVI_ALLOW_UNSAFE_MODEL_CONFIG"), "needs a written review note in "
             "spec.unsafeModelConfigReview", R5, "error")]
    env = {"RTVI_ALLOW_UNSAFE_MODEL_CONFIG": "yes"}
    assert findings(check_remote_code, env=env) == said
    assert findings(check_remote_code, env=env, unsafeModelConfigReview="  ") == said
    assert findings(check_remote_code, env=env, unsafeModelConfigReview="reviewed by A") == []


# --- rule 6 -------------------------------------------------------------------------------------

EAGER = {"blocker": "b", "performanceImpact": "p", "removalCondition": "r"}


def test_eager_mode_needs_its_justification_and_the_other_way_round() -> None:
    assert findings(check_eager, env={"VLLM_ENFORCE_EAGER": "TRUE"}) == [
        (("env", "VLLM_ENFORCE_EAGER"), "eager mode is off by default; turning it on needs "
         "spec.eager with blocker, performanceImpact and removalCondition", R6, "error")]
    assert findings(check_eager, env={"VLLM_ENFORCE_EAGER": "true"}, eager=EAGER) == []
    assert findings(check_eager, eager=EAGER) == [
        (("eager",), "spec.eager is set but VLLM_ENFORCE_EAGER is not true", R6, "warning")]
    assert findings(check_eager, env={"VLLM_ENFORCE_EAGER": "false"}) == []


# --- rule 7 -------------------------------------------------------------------------------------

def test_the_perf_profile_pins_its_settings_unless_marked_non_standard() -> None:
    env = {"VLLM_ENABLE_PREFIX_CACHING": "true", "VLLM_DISABLE_MM_PREPROCESSOR_CACHE": "TRUE",
           "RTVI_EMPTY_CUDA_CACHE_ON_RESULT": "yes"}
    assert findings(check_perf, profile="perf", env=env) == [
        (("env", "VLLM_ENABLE_PREFIX_CACHING"), "profile perf requires "
         "VLLM_ENABLE_PREFIX_CACHING=false; mark the spec spec.nonStandard with a reason to "
         "deviate", R7, "error"),
        (("env", "RTVI_EMPTY_CUDA_CACHE_ON_RESULT"), "profile perf requires "
         "RTVI_EMPTY_CUDA_CACHE_ON_RESULT=false; mark the spec spec.nonStandard with a reason "
         "to deviate", R7, "error")]
    assert findings(check_perf, profile="perf", env=env, nonStandard={"reason": "a study"}) == [
        (("env", "VLLM_ENABLE_PREFIX_CACHING"), "non-standard: VLLM_ENABLE_PREFIX_CACHING=true "
         "(perf wants false)", R7, "warning"),
        (("env", "RTVI_EMPTY_CUDA_CACHE_ON_RESULT"), "non-standard: "
         "RTVI_EMPTY_CUDA_CACHE_ON_RESULT=yes (perf wants false)", R7, "warning")]
    assert findings(check_perf, env=env) == []  # only the perf profile pins them


# --- rule 8 -------------------------------------------------------------------------------------

def test_evs_variables_without_an_evs_session_are_refused() -> None:
    env = {"VLM_VIDEO_PRUNING_RATE": "0.5", "VIA_EVS_TOKEN_BUDGET": "1",
           "VIA_EVS_SESSION": "false"}
    assert findings(check_evs, env=env) == [
        (("env", key), f"{key} is an EVS setting but VIA_EVS_SESSION is not true; a non-EVS "
         "deployment passes no EVS variables", R8, "error")
        for key in ("VLM_VIDEO_PRUNING_RATE", "VIA_EVS_TOKEN_BUDGET")]
    assert findings(check_evs) == []


def test_an_evs_session_needs_its_rate_and_ignore_eos() -> None:
    assert findings(check_evs, env={"VIA_EVS_SESSION": "true"}) == [
        (("env", "VIA_EVS_SESSION"), "VIA_EVS_SESSION=true requires VLM_VIDEO_PRUNING_RATE "
         "(standard 0.5, 0 < rate < 1)", R8, "error"),
        (("env", "VIA_EVS_SESSION"), "VIA_EVS_SESSION=true requires VLLM_IGNORE_EOS=true", R8,
         "error")]
    assert findings(check_evs, env={"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.5",
                                    "VLLM_IGNORE_EOS": "false"}) == [
        (("env", "VLLM_IGNORE_EOS"), "VIA_EVS_SESSION=true requires VLLM_IGNORE_EOS=true", R8,
         "error")]
    assert findings(check_evs, env={"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.5",
                                    "VLLM_IGNORE_EOS": "true"}) == []


@pytest.mark.parametrize("rate", ["0", "1", "1.5", "-0.1", "half", "nan"])
def test_a_pruning_rate_is_strictly_between_zero_and_one(rate: str) -> None:
    assert findings(check_evs, env={"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": rate,
                                    "VLLM_IGNORE_EOS": "true"})[0] == (
        ("env", "VLM_VIDEO_PRUNING_RATE"), f"must be a number with 0 < rate < 1, got {rate!r}",
        R8, "error")


def test_evs_deviations_from_the_standard_are_flagged_not_refused() -> None:
    env = {"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.25", "VLLM_IGNORE_EOS": "1",
           "VLLM_EVS_SIMILARITY_THRESHOLD": "0.4", "VIA_EVS_TOKEN_BUDGET": "2"}
    assert findings(check_evs, env=env) == [
        (("env", "VLM_VIDEO_PRUNING_RATE"), "deviates from the standard "
         "VLM_VIDEO_PRUNING_RATE=0.5 (got 0.25); flagged", R8, "warning"),
        (("env", "VIA_EVS_TOKEN_BUDGET"), "deviates from the standard VIA_EVS_TOKEN_BUDGET=1 "
         "(got 2); flagged", R8, "warning")]
    env["VIA_EVS_TOKEN_BUDGET"] = "lots"  # not a number: not judged as a deviation
    assert len(findings(check_evs, env=env)) == 1


def test_evs_is_refused_on_the_architectures_that_cannot_take_it() -> None:
    env = {"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.5", "VLLM_IGNORE_EOS": "true"}
    assert findings(check_evs, env=env, **model(
        use="u", path=NGC, architecture="NemotronH_Nano_Omni_Reasoning_V3")) == [
        (("model", "architecture"), "EVS sessions are refused on architecture "
         "NemotronH_Nano_Omni_Reasoning_V3", R8, "error")]
    assert findings(check_evs, env=env, **model(use="u", path=NGC, architecture="Other")) == []


# --- rule 9 -------------------------------------------------------------------------------------

def test_the_no_drop_live_profile_pins_its_settings() -> None:
    env = {"RTVI_RTSP_LATENCY": "200", "RTVI_RTPJITTERBUFFER_DROP_ON_LATENCY": "FALSE",
           "RTVI_DISABLE_LIVESTREAM_PREVIEW": "no"}
    assert findings(check_no_drop, liveProfile="no-drop", env=env) == [
        (("env", "RTVI_RTSP_LATENCY"), "liveProfile no-drop requires RTVI_RTSP_LATENCY=300; "
         "mark spec.nonStandard with a reason to deviate", R9, "error"),
        (("env", "RTVI_DISABLE_LIVESTREAM_PREVIEW"), "liveProfile no-drop requires "
         "RTVI_DISABLE_LIVESTREAM_PREVIEW=true; mark spec.nonStandard with a reason to deviate",
         R9, "error")]
    assert findings(check_no_drop, liveProfile="no-drop", env=env,
                    nonStandard={"reason": "why"}) == []
    assert findings(check_no_drop, env=env) == []


# --- environment values and rule 10 -------------------------------------------------------------

def test_host_networking_has_no_port_mapping() -> None:
    assert findings(check_network, network="host", port={"host": 18000, "container": 8000}) == [
        (("port", "host"), "with network: host there is no port mapping; port.host (18000) must "
         "equal port.container (8000)", R_NETWORK, "error")]
    assert findings(check_network, network="host", port={"host": 8000, "container": 8000}) == []
    assert findings(check_network, port={"host": 18000, "container": 8000}) == []


def test_gpus_are_indices_or_uuids_each_once() -> None:
    assert findings(check_gpus, gpus=[0, "GPU-a", "MIG-b"]) == []
    assert findings(check_gpus, gpus=["gpu-a", 0, 0, "GPU-a", "GPU-a"]) == [
        (("gpus", 0), "'gpu-a' is neither an index nor a GPU/MIG UUID", R10, "error"),
        (("gpus", 2), "GPU 0 is listed twice", R10, "error"),
        (("gpus", 4), "GPU GPU-a is listed twice", R10, "error")]
    with pytest.raises(ValidationError):  # an index is 0..1023: the schema says so
        findings(check_gpus, gpus=[-1])
