"""Image references as Docker reads them, a Host's registry logins, and the trust boundary's
registries (issue 37): pure, no engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from specs.errors import SpecError
from specs.images import R_REGISTRIES, login_for, parse_image
from specs.models import RegistryLogin
from specs.trust import NOTHING, TrustError, load_policy
from specs.validate import parse_text

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "registry", "repository", "tag", "digest", "pull"), [
    ("nvcr.io/nvidia/vss-engine/rt-vlm@" + DIGEST, "nvcr.io", "nvidia/vss-engine/rt-vlm",
     None, DIGEST, "nvcr.io/nvidia/vss-engine/rt-vlm@" + DIGEST),
    ("127.0.0.1:5443/vss/rt-vlm:1.2@" + DIGEST, "127.0.0.1:5443", "vss/rt-vlm", "1.2", DIGEST,
     "127.0.0.1:5443/vss/rt-vlm@" + DIGEST),  # by digest: the tag beside it is not asked
    ("localhost/rt-vlm:dev", "localhost", "rt-vlm", "dev", None, "localhost/rt-vlm:dev"),
    ("busybox", "docker.io", "library/busybox", None, None, "busybox:latest"),
    ("nvidia/cuda:12", "docker.io", "nvidia/cuda", "12", None, "nvidia/cuda:12"),
    ("index.docker.io/library/python:3", "docker.io", "library/python", "3", None,
     "python:3"),
])
def test_a_reference_names_its_registry_as_docker_reads_it(
        text: str, registry: str, repository: str, tag: str | None, digest: str | None,
        pull: str) -> None:
    ref = parse_image(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag,
                                                                    digest)
    assert ref.pull == pull
    assert ref.pinned is (digest is not None)


def test_a_login_is_found_for_its_registry_and_the_hubs_aliases_are_one() -> None:
    logins = [RegistryLogin.model_validate({"server": s, "username": "u",
                                            "password": {"fromEnv": "P"}})
              for s in ("nvcr.io", "index.docker.io")]
    assert login_for(logins, "nvcr.io") is logins[0]
    assert login_for(logins, "docker.io") is logins[1]
    assert login_for(logins, "127.0.0.1:5443") is None


HOST = """\
apiVersion: rtvi.reconciler/v1
kind: Host
metadata: {name: gpu}
spec:
  registries:
"""


def test_registry_logins_are_judged_where_they_are_written() -> None:
    text = HOST + ("  - {server: nvcr.io, username: $oauthtoken, password: {fromEnv: K}}\n"
                   "  - {server: nvcr.io, username: x, password: {}}\n")
    with pytest.raises(SpecError) as caught:
        parse_text(text, "hosts.yaml")
    said = str(caught.value)
    assert "hosts.yaml:7:" in said
    assert "give exactly one of fromEnv or fromFile" in said
    assert "registry nvcr.io has a login already (spec.registries[0])" in said
    assert R_REGISTRIES in said


@pytest.mark.parametrize("entry", [
    "{server: https://nvcr.io, username: u, password: {fromEnv: K}}",  # no scheme
    "{server: nvcr.io, username: 'a b', password: {fromEnv: K}}",  # no space
    "{server: nvcr.io, username: u, password: 'plain'}",  # a reference, never a value
    "{server: 'r.io:70000', username: u, password: {fromEnv: K}}",  # port out of range
])
def test_a_bad_login_is_refused(entry: str) -> None:
    with pytest.raises(SpecError):
        parse_text(HOST + f"  - {entry}\n", "hosts.yaml")


def test_registries_a_spec_may_pull_from_are_the_operators(tmp_path: Path) -> None:
    assert NOTHING.refused_pull("nvcr.io") is not None
    trust = tmp_path / "trust.toml"
    trust.write_text('[pull]\nregistries = ["nvcr.io", "127.0.0.1", "r.example:5000"]\n')
    policy = load_policy(trust)
    assert policy.pulls_from("nvcr.io")
    assert policy.pulls_from("127.0.0.1:5443")  # a host alone: every port of it
    assert policy.pulls_from("r.example:5000")
    assert not policy.pulls_from("r.example:5001")
    assert not policy.pulls_from("docker.io")
    refused = policy.refused_pull("docker.io")
    assert refused is not None
    assert "--allow-pull docker.io" in refused
    assert str(trust) in refused
    assert policy.with_pulls(("docker.io",)).pulls_from("docker.io")
    kept = policy.with_cli(("secrets=/run/secrets",), ())
    assert kept.pulls_from("nvcr.io")  # other options keep the registries


@pytest.mark.parametrize("text", ['[pull]\nregistries = "nvcr.io"\n',
                                  '[pull]\nregistries = ["https://nvcr.io"]\n',
                                  '[pull]\nmirrors = []\n'])
def test_a_bad_pull_section_is_refused(tmp_path: Path, text: str) -> None:
    trust = tmp_path / "trust.toml"
    trust.write_text(text)
    with pytest.raises(TrustError, match="registries"):
        load_policy(trust)
