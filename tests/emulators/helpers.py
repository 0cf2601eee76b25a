"""Helpers for the emulator tests: a real emulator process, Docker objects by label.

Why subprocesses rather than an in-process server: the emulator's start-up log, signal handling
and exit codes are part of its contract, and only a real process shows them.

Docker hygiene: everything a test run creates carries ``rtvi.test=1``, a per-run session label and
a creation time. Teardown removes the run's own objects by the session label; the start of a run
removes leftovers of crashed runs (older than ``STALE_AFTER_S``) without touching a concurrent run.
Traffic stays on loopback: emulators listen on 127.0.0.1 and containers publish on 127.0.0.1 only.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from controllers.waiting import until

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
POLL_INTERVAL_S = 0.02
DEFAULT_WAIT_S = 10.0
TEST_LABEL = "rtvi.test"
SESSION_LABEL = "rtvi.test.session"
SUITE_LABEL = "rtvi.test.suite"
CREATED_LABEL = "rtvi.test.created"
SUITE = "emulators"
STALE_AFTER_S = 600
# Knobs of the emulator and of the real service: a test sets exactly what it needs.
EMULATOR_ENV_PREFIXES = ("RTVI_EMU_", "VLM_", "VLLM_", "MODEL_PATH", "NGC_", "HF_")

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], timeout: float = DEFAULT_WAIT_S, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something other than None (or fail after ``timeout``)."""
    found = until(probe, timeout_s=timeout, pace=POLL_INTERVAL_S)
    if found is None:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    return found


def http_client(base_url: str) -> httpx.Client:
    """A client that ignores proxy settings, so requests can only go to the loopback URL."""
    return httpx.Client(base_url=base_url, timeout=2.0, trust_env=False)


@dataclass
class EmulatorProcess:
    """A running ``python -m emulators.rtvi`` with its output captured in files."""

    process: subprocess.Popen[bytes]
    port: int
    stdout_path: Path
    stderr_path: Path
    started: float

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def get(self, path: str) -> httpx.Response:
        with http_client(self.base_url) as client:
            return client.get(path)

    def try_get(self, path: str) -> httpx.Response | None:
        """The response, or None while the server does not listen yet."""
        try:
            return self.get(path)
        except httpx.TransportError:
            return None

    def wait_listening(self) -> None:
        def probe() -> bool | None:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"emulator exited {self.process.returncode}: {self.stderr()[-2000:]}"
                )
            return True if self.try_get("/v1/health/live") is not None else None

        wait_for(probe, what="the emulator to listen")

    def wait_ready(self, timeout: float = DEFAULT_WAIT_S) -> float:
        """Poll ready until 200; returns seconds since the process was started."""

        def probe() -> float | None:
            response = self.try_get("/v1/health/ready")
            if response is not None and response.status_code == 200:
                return time.monotonic() - self.started
            return None

        return wait_for(probe, timeout, "the emulator to be ready")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float = DEFAULT_WAIT_S) -> int:
        return self.process.wait(timeout=timeout)


# --- Docker -----------------------------------------------------------------------------------


def docker(*args: str, timeout: float = 60.0, check: bool = True) -> str:
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _labelled(kind: str, label: str) -> list[str]:
    listing = ["ps", "-a", "-q"] if kind == "container" else ["images", "-a", "-q"]
    return sorted(set(docker(*listing, "--filter", f"label={label}").split()))


def remove_containers(label: str) -> None:
    ids = _labelled("container", label)
    if ids:
        docker("rm", "-f", "-v", *ids, check=False)


def remove_images(label: str) -> None:
    """Children before parents: repeat until nothing carrying ``label`` is left."""
    for _ in range(5):
        ids = _labelled("image", label)
        if not ids:
            return
        docker("rmi", "-f", *ids, check=False)


def _created_of(kind: str, ids: list[str]) -> Mapping[str, float]:
    if not ids:
        return {}
    output = docker(
        kind,
        "inspect",
        "--format",
        f'{{{{.Id}}}} {{{{index .Config.Labels "{CREATED_LABEL}"}}}}',
        *ids,
        check=False,
    )
    created: dict[str, float] = {}
    for line in output.splitlines():
        object_id, _, stamp = line.partition(" ")
        try:
            created[object_id] = float(stamp)
        except ValueError:
            created[object_id] = 0.0  # unlabelled: certainly not from a live run
    return created


def remove_stale_leftovers() -> None:
    """Objects of crashed earlier runs of this suite; concurrent runs are younger and stay."""
    cutoff = time.time() - STALE_AFTER_S
    suite = f"{SUITE_LABEL}={SUITE}"
    stale = [
        i for i, t in _created_of("container", _labelled("container", suite)).items() if t < cutoff
    ]
    if stale:
        docker("rm", "-f", "-v", *stale, check=False)
    for _ in range(5):
        images = [
            i for i, t in _created_of("image", _labelled("image", suite)).items() if t < cutoff
        ]
        if not images:
            break
        docker("rmi", "-f", *images, check=False)


@dataclass(frozen=True)
class TestImages:
    """What the session fixture built: the emulator image and its private base repository."""

    __test__ = False  # not a test class despite the name

    image_id: str
    tag: str
    base_repository: str
    labels: Mapping[str, str]

    def label_args(self) -> list[str]:
        return [arg for key, value in self.labels.items() for arg in ("--label", f"{key}={value}")]
