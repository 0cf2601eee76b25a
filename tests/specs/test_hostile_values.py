"""Paths, URLs, addresses and image references a hostile spec could bend (issue 26): each is
refused where it was written, with its rule, by a parser or a full-match pattern."""

from __future__ import annotations

from typing import Any

import pytest

from specs.rules import R2, R_MOUNTS
from tests.specs.every_field import DOCS, FieldPath, changed, refusals, refused_at

DEP = "Deployment/vlm"
QUICK = "Deployment/quick"
SSH = "Host/gpu-box"
STREAMS = "StreamSet/streams"
BENCH = "Experiment/bench"
CANARY = "Experiment/canary"

CASES: list[tuple[str, str, FieldPath, Any]] = [
    # Paths are compared by prefix: only their normal form is accepted.
    ("model-path-climbs-out-of-its-mount", DEP, ("spec", "model", "path"),
     "/models/../etc/shadow"),
    ("mount-target-root", DEP, ("spec", "mounts", 0, "target"), "/"),
    ("mount-source-root", DEP, ("spec", "mounts", 0, "source"), "/"),
    ("mount-target-dotdot", DEP, ("spec", "mounts", 0, "target"), "/models/.."),
    ("secret-file-climbs", DEP, ("spec", "secrets", 1, "fromFile"),
     "/run/secrets/../../etc/shadow"),
    ("relative-key-file", SSH, ("spec", "ssh", "keyFile"), "id_ed25519"),
    ("empty-known-hosts", SSH, ("spec", "ssh", "knownHostsFile"), ""),
    ("evidence-root-climbs", CANARY, ("spec", "evidenceRoot"), "/var/lib/../../etc"),
    ("harness-config-climbs", BENCH, ("spec", "benchmark", "harness", "config"),
     "../../../../etc/passwd"),
    ("harness-config-absolute-climbs", BENCH, ("spec", "benchmark", "harness", "config"),
     "/opt/vss/../../etc/passwd"),
    ("harness-workdir-relative", BENCH, ("spec", "benchmark", "harness", "workdir"), "vss"),
    ("media-path-trailing-slash", CANARY, ("spec", "canary", "media", 0, "path"),
     "/media/cat.png/"),
    # URLs and Hosts: a real parser, a port in 1..65535, never a leading '-'.
    ("rtsp-port-0", STREAMS, ("spec", "sources", 0, "url"), "rtsp://127.0.0.1:0/cam"),
    ("rtsp-port-99999", STREAMS, ("spec", "sources", 0, "url"), "rtsp://127.0.0.1:99999/cam"),
    ("rtsp-option-host", STREAMS, ("spec", "sources", 0, "url"), "rtsp://-oProxy/cam"),
    ("vst-port-99999", STREAMS, ("spec", "vst", "url"), "http://127.0.0.1:99999"),
    ("dcgm-port-0", CANARY, ("spec", "telemetry", "dcgmUrl"), "http://127.0.0.1:0/metrics"),
    ("ssh-option-host", SSH, ("spec", "docker"), "ssh://-oProxyCommand=id"),
    ("ssh-option-user", SSH, ("spec", "docker"), "ssh://-oProxyCommand=id@box"),
    ("ssh-port-0", SSH, ("spec", "docker"), "ssh://perf@box:0"),
    ("ssh-port-99999", SSH, ("spec", "docker"), "ssh://perf@box:99999"),
    ("ssh-path", SSH, ("spec", "docker"), "ssh://perf@box/etc"),
    ("unix-socket-relative", "Host/local", ("spec", "docker"), "unix://docker.sock"),
    ("bind-scope-id", DEP, ("spec", "port", "address"), "fe80::1%eth0"),
    # Image references: Docker's grammar, full match.
    ("image-option", DEP, ("spec", "image"), "-oops"),
    ("image-space", QUICK, ("spec", "image"), "rtvi emulator:dev"),
    ("image-digest-newline", DEP, ("spec", "image"),
     "nvcr.io/nvidia/rt-vlm@sha256:" + "ab" * 32 + "\n"),
    ("image-upper-case-path", QUICK, ("spec", "image"), "RTVI-emulator:dev"),
    # Found by a second sweep: shapes a pattern let through that no parser would.
    ("rtsp-space-in-path", STREAMS, ("spec", "sources", 0, "url"), "rtsp://10.0.0.7/ma in"),
    ("rtsp-empty-port", STREAMS, ("spec", "sources", 0, "url"), "rtsp://h:/x"),
    ("dcgm-empty-port", CANARY, ("spec", "telemetry", "dcgmUrl"), "http://127.0.0.1:/metrics"),
    ("rtsp-bad-ipv6", STREAMS, ("spec", "sources", 0, "url"), "rtsp://[1.2.3.4.5]/x"),
    ("rtsp-junk-after-ipv6", STREAMS, ("spec", "sources", 0, "url"), "rtsp://[::1]x/cam"),
    ("ssh-bad-ipv6", SSH, ("spec", "docker"), "ssh://ops@[:::::]:22"),
    ("image-registry-port-99999", DEP, ("spec", "image"),
     "nvcr.io:99999/x@sha256:" + "ab" * 32),
    ("image-registry-port-0", DEP, ("spec", "image"), "nvcr.io:0/x@sha256:" + "ab" * 32),
    ("mount-target-proc", DEP, ("spec", "mounts", 0, "target"), "/proc/self"),
    ("scenario-option", BENCH, ("spec", "benchmark", "scenario"), "--list-scenarios"),
    ("harness-config-dot", BENCH, ("spec", "benchmark", "harness", "config"), "."),
    ("harness-config-option", BENCH, ("spec", "benchmark", "harness", "config"), "-oProxy"),
    ("implementation-path-climbs", DEP, ("spec", "model", "implementationPath"),
     "/models/../etc"),
    ("env-infinity", DEP, ("spec", "env", "X_INF"), float("inf")),
    ("label-value-huge", DEP, ("metadata", "labels", "tier"), "x" * 100_000),
]


@pytest.mark.parametrize(("doc", "path", "value"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_bent_path_url_address_or_image_is_refused_where_it_was_written(
        doc: str, path: FieldPath, value: Any) -> None:
    refused_at(changed(doc, path, value), ".".join(str(p) for p in path))


def test_a_model_path_out_of_its_mount_names_the_normal_form_and_rule_2() -> None:
    [(field, rule, _)] = refusals(changed(DEP, ("spec", "model", "path"), "/models/../etc"))
    assert (field, rule) == ("spec.model.path", R2)


@pytest.mark.parametrize(("doc", "path", "value"), [
    (SSH, ("spec", "docker"), "ssh://box"),
    (SSH, ("spec", "docker"), "ssh://perf@[::1]:2222"),
    (SSH, ("spec", "docker"), "ssh://perf.user@gpu-1.example.com:22"),
    (DEP, ("spec", "image"), "localhost:5000/team/rt-vlm@sha256:" + "cd" * 32),
    (QUICK, ("spec", "image"), "rtvi-emulator:dev"),
    (STREAMS, ("spec", "sources", 0, "url"), "rtsp://[::1]:8554/a/b?x=1"),
    (BENCH, ("spec", "benchmark", "harness", "config"), "perf/configs/bcd.yaml"),
    (DEP, ("spec", "port", "address"), "::1"),
], ids=["ssh-bare", "ssh-ipv6", "ssh-dotted-user", "image-registry-port", "image-tag",
        "rtsp-ipv6", "config-relative", "bind-ipv6"])
def test_well_formed_values_still_pass(doc: str, path: FieldPath, value: Any) -> None:
    assert refusals(changed(doc, path, value)) == []


def test_two_mounts_on_one_target_are_refused_where_the_second_is_written() -> None:
    dep = next(d for d in DOCS if f"{d['kind']}/{d['metadata']['name']}" == DEP)
    mount = dict(dep["spec"]["mounts"][0])
    text = changed(DEP, ("spec", "mounts"), [mount, {**mount, "source": "/models2"}])
    assert [(f, r) for f, r, _ in refusals(text)] == [("spec.mounts.1.target", R_MOUNTS)]
