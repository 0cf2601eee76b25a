"""Where the harness runs: the Host folders a job's harness container is given, and nothing
more (``controllers.kinds.experiments.harnessproc``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter

from controllers.kinds.experiments.benchmark.runtype import harness_reads, trusted_config
from controllers.kinds.experiments.harnessproc import (
    HarnessError,
    host_mounts,
    interpreter_root,
    read_only_binds,
)
from controllers.kinds.experiments.runner.job import JobPlan
from specs.experiments.benchmark import BenchmarkSpec
from specs.trust import TrustPolicy, enforce, policy


def test_binds_are_read_only_at_their_own_path_normalised_and_never_nested() -> None:
    binds = read_only_binds(["/opt/vss/rt-vlm", "/opt/vss/rt-vlm/perf/../perf/benchmark",
                             "/srv/media/clip.mp4", "/srv/media/", "relative/path"], "/job")
    assert binds == [("/opt/vss/rt-vlm", "/opt/vss/rt-vlm", True),
                     ("/srv/media", "/srv/media", True)]


def test_the_root_the_job_volume_and_the_kernels_filesystems_are_never_bound() -> None:
    assert read_only_binds(["/", "/job", "/job/evidence/x", "/jobs", "/proc/1/root",
                            "/sys", "/dev/shm"], "/job") == [
        ("/jobs", "/jobs", True)]  # a sibling named alike is not under /job


def test_the_harness_container_gets_the_hosts_usr_and_what_it_reads() -> None:
    assert host_mounts(["/usr/share/x", "/opt/vss"], "/job") == [
        ("/opt/vss", "/opt/vss", True), ("/usr", "/usr", True)]


def test_the_interpreter_root_is_a_virtual_environment_or_the_programs_folder() -> None:
    assert interpreter_root(["/home/u/perf-env/bin/python", "x.py"]) == ["/home/u/perf-env"]
    assert interpreter_root(["/opt/tools/harness"]) == ["/opt/tools"]
    assert interpreter_root(["python3", "x.py"]) == []  # found on the Host's PATH, in /usr
    assert interpreter_root([]) == []


def test_the_harness_reads_its_checkout_config_interpreter_and_the_scenarios_files(
        tmp_path: Path) -> None:
    bench = BenchmarkSpec.model_validate({
        "harness": {"argv": ["/home/u/env/bin/python", "/opt/bench/run.py"],
                    "workdir": "/opt/vss/rt-vlm", "config": "perf/benchmark/c.yaml"},
        "scenario": "burst", "mode": "file_burst"})
    config = {"test_scenarios": {
        "burst": {"videos": [{"filepath": "/srv/media/a.mp4"}, {"filepath": "../up.mp4"},
                             {"rtsp_urls_file": "/srv/urls.txt"}, "not a mapping"]},
        "other": {"videos": [{"filepath": "/elsewhere/b.mp4"}]}}}
    assert harness_reads(bench, config) == [
        "/opt/vss/rt-vlm", "/opt/vss/rt-vlm/perf/benchmark", "/home/u/env", "/opt/bench",
        "/srv/media/a.mp4", "/opt/vss/up.mp4", "/srv/urls.txt"]  # only the scenario that runs
    assert harness_reads(bench, None)[:4] == harness_reads(bench, config)[:4]


def config_naming(tmp_path: Path, *named: str) -> BenchmarkSpec:
    harness = tmp_path / "vss"
    harness.mkdir(exist_ok=True)
    (harness / "c.yaml").write_text(yaml.safe_dump({"test_scenarios": {"burst": {
        "videos": [{"filepath": n} for n in named]}}}))
    return BenchmarkSpec.model_validate({
        "harness": {"argv": ["python3", "run.py"], "workdir": str(harness), "config": "c.yaml"},
        "scenario": "burst", "mode": "file_burst"})


def test_files_the_harness_config_names_are_judged_by_the_operators_trust(
        tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    (media / "a.mp4").write_bytes(b"x")
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    (tmp_path / "vss").mkdir()
    (tmp_path / "vss" / "link.mp4").symlink_to(secret)  # planted inside, leading out
    chosen = policy({"harness": (str(tmp_path / "vss"),), "media": (str(media),)}, (), "test")
    enforce(chosen)
    try:
        assert trusted_config(config_naming(tmp_path, str(media / "a.mp4"), "local.mp4"))
        for outside in (str(secret), "../secret.txt", "link.mp4"):
            with pytest.raises(HarnessError, match=r"outside the folders harness and media "
                                                   r"may be read from \(trust boundary"):
                trusted_config(config_naming(tmp_path, str(media / "a.mp4"), outside))
    finally:
        enforce(None)
    assert trusted_config(config_naming(tmp_path, str(secret)))  # no policy: a library call


def test_a_jobs_plan_carries_the_operators_trust_under_the_names_it_gave(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "named").symlink_to(real)
    chosen = policy({"media": (str(tmp_path / "named") + "/",)}, ("python3",), "test")
    back = TypeAdapter(TrustPolicy).validate_json(TypeAdapter(TrustPolicy).dump_json(chosen))
    assert back == chosen
    # In the job's runner the operator's link may be missing: the name it gave still holds.
    assert back.holds("media", str(tmp_path / "named" / "a.mp4"))
    assert back.holds("media", str(real / "a.mp4"))
    assert not back.holds("media", str(tmp_path / "a.mp4"))
    assert "trust" in JobPlan.model_fields


def test_the_harness_container_binds_no_argument_outside_the_folders(tmp_path: Path) -> None:
    bench = BenchmarkSpec.model_validate({
        "harness": {"argv": ["python3", "run.py", "/etc/shadow"], "workdir": str(tmp_path),
                    "config": "c.yaml"},
        "scenario": "burst", "mode": "file_burst"})
    assert "/etc" in harness_reads(bench, None)  # no policy: a library call binds it
    enforce(policy({"harness": (str(tmp_path),)}, ("python3 run.py",), "test"))
    try:
        with pytest.raises(HarnessError, match=r"argument '/etc/shadow' is outside"):
            harness_reads(bench, None)
    finally:
        enforce(None)


def test_a_harness_config_turned_into_a_link_out_is_neither_run_nor_read(
        tmp_path: Path) -> None:
    """Planted after validation: the scenario listing (which runs the harness on its config)
    and the config's own read both judge it first."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("test_scenarios: {}\n")
    bench = config_naming(tmp_path, "x.mp4")
    config = tmp_path / "vss" / "c.yaml"
    config.unlink()
    config.symlink_to(secret)
    enforce(policy({"harness": (str(tmp_path / "vss"),)}, ("python3 run.py",), "test"))
    try:
        with pytest.raises(HarnessError, match=r"harness\.config: .*leads to"):
            harness_reads(bench, None)
        with pytest.raises(HarnessError, match=r"leads to .*secret\.yaml.*trust boundary"):
            trusted_config(bench)
    finally:
        enforce(None)


def test_an_argument_that_is_an_allowed_folder_binds_that_folder_not_its_parent(
        tmp_path: Path) -> None:
    clips = tmp_path / "clips"
    clips.mkdir()
    bench = BenchmarkSpec.model_validate({
        "harness": {"argv": ["python3", "run.py", str(clips)], "workdir": str(tmp_path / "vss"),
                    "config": "c.yaml"},
        "scenario": "burst", "mode": "file_burst"})
    enforce(policy({"harness": (str(tmp_path / "vss"),), "media": (str(clips),)},
                   ("python3 run.py",), "test"))
    try:
        reads = harness_reads(bench, None)
    finally:
        enforce(None)
    assert str(clips) in reads
    assert str(tmp_path) not in reads  # its parent holds the operator's other files
