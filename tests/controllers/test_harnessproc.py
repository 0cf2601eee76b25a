"""Where the harness runs: the Host folders a job's harness container is given, and nothing
more (``controllers.experiments.harnessproc``)."""

from __future__ import annotations

from pathlib import Path

from controllers.experiments.benchmark.runtype import harness_reads
from controllers.experiments.harnessproc import host_mounts, interpreter_root, read_only_binds
from specs.experiments.benchmark import BenchmarkSpec


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
        "burst": {"videos": [{"filepath": "/srv/media/a.mp4"}, {"filepath": "rel.mp4"},
                             {"rtsp_urls_file": "/srv/urls.txt"}, "not a mapping"]},
        "other": {"videos": [{"filepath": "/elsewhere/b.mp4"}]}}}
    assert harness_reads(bench, config) == [
        "/opt/vss/rt-vlm", "/opt/vss/rt-vlm/perf/benchmark", "/home/u/env", "/opt/bench",
        "/srv/media/a.mp4", "/srv/urls.txt"]  # only the scenario that runs
    assert harness_reads(bench, None)[:4] == harness_reads(bench, config)[:4]
