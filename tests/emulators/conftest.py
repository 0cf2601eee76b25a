"""Fixtures of the emulator tests: emulator processes and the session's emulator image.

The session image is built from a session-private base repository and removed, with every
container of the run, by the session label at teardown (see ``helpers`` for the label scheme).
This ``emulator_image`` deliberately shadows the project-wide fixture of the same name: it labels
what it builds so it can remove it, while the project-wide one builds the shared dev image.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from emulators import image
from tests.emulators.helpers import (
    CREATED_LABEL,
    DEFAULT_WAIT_S,
    EMULATOR_ENV_PREFIXES,
    LOOPBACK,
    REPO_ROOT,
    SESSION_LABEL,
    SUITE,
    SUITE_LABEL,
    TEST_LABEL,
    EmulatorProcess,
    TestImages,
    remove_containers,
    remove_images,
    remove_stale_leftovers,
)
from tests.emulators.rtsp_source import RtspSource
from tests.ports import free_port


@pytest.fixture
def start_emulator(tmp_path: Path) -> Iterator[Callable[..., EmulatorProcess]]:
    """Factory: ``start_emulator(RTVI_EMU_STARTUP_DELAY_S="1", ...)`` starts one emulator."""
    started: list[EmulatorProcess] = []

    def start(**knobs: str) -> EmulatorProcess:
        port = free_port()
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(EMULATOR_ENV_PREFIXES)
        }
        env.update({"RTVI_EMU_HOST": LOOPBACK, "RTVI_EMU_PORT": str(port), **knobs})
        index = len(started)
        stdout_path = tmp_path / f"emulator-{index}.stdout"
        stderr_path = tmp_path / f"emulator-{index}.stderr"
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "emulators.rtvi"],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=err,
            )
        emulator = EmulatorProcess(process, port, stdout_path, stderr_path, time.monotonic())
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        if emulator.process.poll() is None:
            emulator.process.send_signal(signal.SIGKILL)
            emulator.process.wait(timeout=DEFAULT_WAIT_S)


@pytest.fixture(scope="session")
def emulator_image() -> Iterator[TestImages]:
    """Build the emulator image once per session from a session-private base repository.

    The private base repository keeps concurrent runs from removing each other's base, and makes
    the first build an import (so the reuse test compares a real import with a real no-op).
    """
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        pytest.fail("these tests need a running Docker engine (`docker info` failed)")
    remove_stale_leftovers()
    session = uuid.uuid4().hex[:12]
    labels = {
        TEST_LABEL: "1",
        SESSION_LABEL: session,
        SUITE_LABEL: SUITE,
        CREATED_LABEL: str(int(time.time())),
    }
    built = TestImages(
        image_id="",
        tag=f"rtvi-emulator:test-{session}",
        base_repository=f"local/rtvi-pybase-test-{session}",
        labels=labels,
    )
    try:
        image_id = image.build_emulator_image(
            built.tag, labels=labels, base_repository=built.base_repository
        )
        yield TestImages(image_id, built.tag, built.base_repository, labels)
    finally:
        remove_containers(f"{SESSION_LABEL}={session}")
        remove_images(f"{SESSION_LABEL}={session}")


# Mount name -> (centre RRGGBB, border RRGGBB or None). Distinct colours per mount make a caption
# that quotes the wrong stream's frames fail.
RTSP_MOUNTS: dict[str, tuple[str, str | None]] = {
    "red": ("FF0000", None),
    "green": ("00FF00", None),
    "blue-yellow": ("0000FF", "FFFF00"),
}


@pytest.fixture(scope="session")
def rtsp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RtspSource]:
    """One real GStreamer RTSP server on loopback for the session, polled ready per mount."""
    log = tmp_path_factory.mktemp("rtsp") / "rtsp-source.log"
    source = RtspSource(free_port(), dict(RTSP_MOUNTS), log)
    try:
        source.start()
        yield source
    finally:
        source.stop()


@pytest.fixture
def rtsp_source(rtsp_server: RtspSource) -> RtspSource:
    """The session's RTSP server, checked alive and serving every mount before each test: if it
    died in an earlier test, this test fails at once with the server's log instead of every
    later test timing out on a silent port."""
    try:
        rtsp_server.assert_serving()
    except AssertionError as exc:
        pytest.fail(str(exc))
    return rtsp_server
