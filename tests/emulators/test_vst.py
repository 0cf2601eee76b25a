"""The VST emulator end to end: a real process, a real RTSP camera, real decoding by ffmpeg.

Every colour check decodes a frame that travelled camera -> emulator relay -> ffmpeg, so a relay
that served the wrong source, or nothing, fails here. Readiness is polled; nothing sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.emulators.helpers import LOOPBACK, REPO_ROOT, http_client, wait_for
from tests.emulators.vst_source import SYSTEM_PYTHON, ColourSource
from tests.ports import free_port

API = "/vst/api/v1"
RED = (255, 0, 0)
BLUE = (0, 0, 255)
GREEN = (0, 255, 0)
COLOUR_TOLERANCE = 20
FRAME_W, FRAME_H = 32, 24
FRAME_BYTES = FRAME_W * FRAME_H * 3
GRAB_TIMEOUT_S = 10.0
FFMPEG_INPUT = [
    "ffmpeg",
    "-nostdin",
    "-loglevel",
    "error",
    "-rtsp_transport",
    "tcp",
    "-timeout",
    "3000000",  # socket I/O timeout (µs): a silent relay fails the grab instead of hanging it
    "-analyzeduration",
    "500000",
    "-probesize",
    "50000",
]
FFMPEG_OUTPUT = ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{FRAME_W}x{FRAME_H}", "-"]
SECRET = "canary-Pw-7f3a"


@dataclass
class VstEmulator:
    process: subprocess.Popen[bytes]
    http_port: int
    rtsp_port: int
    stderr_path: Path

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def request(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        with http_client(self.base_url) as client:
            return client.request(method, path, **kwargs)  # type: ignore[arg-type]

    def add(self, name: str, url: str, **extra: object) -> str:
        response = self.request(
            "POST", f"{API}/sensor/add", json={"sensorUrl": url, "name": name, **extra}
        )
        assert response.status_code == 200, response.text
        sensor_id: str = response.json()["sensorId"]
        return sensor_id

    def streams(self, sensor_id: str) -> list[dict[str, Any]]:
        response = self.request("GET", f"{API}/sensor/{sensor_id}/streams")
        assert response.status_code == 200, response.text
        streams: list[dict[str, Any]] = response.json()
        return streams

    def add_live(self, name: str, url: str) -> tuple[str, str]:
        """Add a sensor and wait for its re-published URL: ``(sensorId, /live URL)``."""
        sensor_id = self.add(name, url)
        return sensor_id, self.live_url(sensor_id)

    def live_url(self, sensor_id: str) -> str:
        """The re-published URL, once the API lists it."""
        streams = wait_for(lambda: self.streams(sensor_id) or None, what="the /live URL")
        url = streams[0]["url"]
        assert isinstance(url, str)
        return url

    def stderr(self) -> str:
        return self.stderr_path.read_text()


def _mean(frame: bytes) -> tuple[float, float, float]:
    pixels = len(frame) // 3
    return (
        sum(frame[0::3]) / pixels,
        sum(frame[1::3]) / pixels,
        sum(frame[2::3]) / pixels,
    )


def grab(url: str) -> tuple[float, float, float] | None:
    """Mean RGB of one decoded frame, or None when ffmpeg fails or times out."""
    try:
        result = subprocess.run(
            [*FFMPEG_INPUT, "-i", url, "-frames:v", "1", *FFMPEG_OUTPUT],
            capture_output=True,
            timeout=GRAB_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0 or len(result.stdout) < FRAME_BYTES:
        return None
    return _mean(result.stdout[:FRAME_BYTES])


def assert_colour(url: str, expected: tuple[int, int, int]) -> None:
    mean = grab(url)
    assert mean is not None, f"no frame decoded from {url}"
    assert all(abs(m - e) <= COLOUR_TOLERANCE for m, e in zip(mean, expected, strict=True)), (
        f"{url}: mean RGB {mean} is not {expected}"
    )


@pytest.fixture(scope="module")
def camera() -> Iterator[ColourSource]:
    source = ColourSource({"red": RED, "blue": BLUE}).start()
    yield source
    source.stop()


@pytest.fixture
def start_vst(tmp_path: Path) -> Iterator[Callable[..., VstEmulator]]:
    """Factory: ``start_vst(VST_EMU_URL_DELAY_S="1")`` starts an emulator on free ports."""
    started: list[VstEmulator] = []

    def start(**knobs: str) -> VstEmulator:
        http_port, rtsp_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VST_EMU_")}
        env.update(
            VST_EMU_HOST=LOOPBACK,
            VST_EMU_HTTP_PORT=str(http_port),
            VST_EMU_RTSP_PORT=str(rtsp_port),
            **knobs,
        )
        stderr_path = tmp_path / f"vst-{len(started)}.stderr"
        with stderr_path.open("wb") as err:
            process = subprocess.Popen(
                [SYSTEM_PYTHON, "-m", "emulators.vst"],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        emulator = VstEmulator(process, http_port, rtsp_port, stderr_path)
        started.append(emulator)

        def ready() -> bool | None:
            if process.poll() is not None:
                raise AssertionError(f"emulator exited {process.returncode}: {emulator.stderr()}")
            try:
                response = emulator.request("GET", f"{API}/sensor/version")
            except httpx.TransportError:
                return None
            return True if response.status_code == 200 else None

        wait_for(ready, what="the VST emulator to answer")
        return emulator

    yield start
    for emulator in started:
        if emulator.process.poll() is None:
            emulator.process.kill()
            emulator.process.wait(timeout=GRAB_TIMEOUT_S)


def test_version_says_vst(start_vst: Callable[..., VstEmulator]) -> None:
    body = start_vst().request("GET", f"{API}/sensor/version").json()
    assert body["type"] == "vst"
    assert body["version"]


def test_each_sensor_republishes_its_own_colour(
    start_vst: Callable[..., VstEmulator], camera: ColourSource
) -> None:
    vst = start_vst()
    red_id = vst.add("cam-red", camera.url("red"))
    blue_id = vst.add("cam-blue", camera.url("blue"), location="bay 1", tags=["test"])
    assert red_id != blue_id

    listed = {s["sensorId"]: s for s in vst.request("GET", f"{API}/sensor/list").json()}
    assert listed[red_id]["name"] == "cam-red"
    assert listed[red_id]["state"] == "online"
    assert listed[blue_id]["sensorUrl"] == camera.url("blue")
    assert listed[blue_id]["location"] == "bay 1"

    red_stream, blue_stream = vst.streams(red_id)[0], vst.streams(blue_id)[0]
    assert red_stream["url"] == f"rtsp://{LOOPBACK}:{vst.rtsp_port}/live/{red_id}"
    assert red_stream["isMain"] is True
    assert red_stream["metadata"]["codec"] == "H264"
    grouped = vst.request("GET", f"{API}/sensor/streams").json()
    assert grouped == {red_id: [red_stream], blue_id: [blue_stream]}

    assert_colour(str(red_stream["url"]), RED)
    assert_colour(str(blue_stream["url"]), BLUE)


def test_live_url_appears_only_after_the_delay(
    start_vst: Callable[..., VstEmulator], camera: ColourSource
) -> None:
    delay = 1.5
    vst = start_vst(VST_EMU_URL_DELAY_S=str(delay))
    added = time.monotonic()
    sensor_id = vst.add("late", camera.url("red"))
    assert vst.streams(sensor_id) == []
    assert vst.request("GET", f"{API}/sensor/streams").json() == {sensor_id: []}
    url = vst.live_url(sensor_id)
    assert time.monotonic() - added >= delay
    assert url.endswith(f"/live/{sensor_id}")


def test_drop_cuts_consumers_and_restore_serves_again(
    start_vst: Callable[..., VstEmulator], camera: ColourSource
) -> None:
    vst = start_vst()
    sensor_id, url = vst.add_live("cam", camera.url("red"))
    consumer = subprocess.Popen(
        [*FFMPEG_INPUT, "-i", url, *FFMPEG_OUTPUT],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert consumer.stdout is not None
        first = consumer.stdout.read(FRAME_BYTES)  # blocks until a frame flowed through
        assert len(first) == FRAME_BYTES
        assert _mean(first)[0] > 255 - COLOUR_TOLERANCE

        dropped = vst.request("POST", f"/emulator/sensors/{sensor_id}/drop")
        assert dropped.status_code == 200
        # Frames stop: the relay closes the connection, so the consumer ends (a hang times out).
        consumer.wait(timeout=GRAB_TIMEOUT_S)
    finally:
        consumer.kill()
        consumer.wait()
    assert grab(url) is None
    assert vst.request("GET", f"{API}/sensor/list").json()[0]["state"] == "offline"

    assert vst.request("POST", f"/emulator/sensors/{sensor_id}/restore").status_code == 200
    assert_colour(url, RED)
    assert vst.request("GET", f"{API}/sensor/list").json()[0]["state"] == "online"


def test_source_that_comes_up_late_is_relayed(start_vst: Callable[..., VstEmulator]) -> None:
    late = ColourSource({"green": GREEN})
    vst = start_vst()
    _, url = vst.add_live("late-camera", late.url("green"))
    assert grab(url) is None  # nothing upstream yet
    late.start()
    try:
        assert_colour(url, GREEN)
    finally:
        late.stop()


def test_add_fault_fails_the_next_adds_then_clears(
    start_vst: Callable[..., VstEmulator], camera: ColourSource
) -> None:
    vst = start_vst()
    fault = vst.request("POST", "/emulator/faults", json={"op": "add", "count": 2, "status": 500})
    assert fault.status_code == 200
    body = {"sensorUrl": camera.url("red"), "name": "cam"}
    assert vst.request("POST", f"{API}/sensor/add", json=body).status_code == 500
    assert vst.request("POST", f"{API}/sensor/add", json=body).status_code == 500
    assert vst.request("GET", f"{API}/sensor/list").json() == []
    assert vst.request("POST", f"{API}/sensor/add", json=body).status_code == 200
    state = vst.request("GET", "/emulator/state").json()
    assert state["faults"]["add"]["remaining"] == 0
    assert len(state["sensors"]) == 1


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"url": "rtsp://127.0.0.1:1/x", "name": "cam"}, "'url'"),
        ({"sensorUrl": "rtsp://127.0.0.1:1/x", "name": "cam", "colour": "red"}, "colour"),
        ({"sensorUrl": "http://127.0.0.1:1/x", "name": "cam"}, "sensorUrl"),
        ({"sensorUrl": "rtsp://127.0.0.1:1/x"}, "name"),
    ],
)
def test_bad_add_bodies_are_422_naming_the_field(
    start_vst: Callable[..., VstEmulator], body: dict[str, Any], named: str
) -> None:
    vst = start_vst()
    response = vst.request("POST", f"{API}/sensor/add", json=body)
    assert response.status_code == 422
    assert named in response.json()["error_message"]
    assert vst.request("GET", f"{API}/sensor/list").json() == []


def test_delete_removes_the_sensor_and_its_live_path(
    start_vst: Callable[..., VstEmulator], camera: ColourSource
) -> None:
    vst = start_vst()
    sensor_id, url = vst.add_live("cam", camera.url("blue"))
    assert_colour(url, BLUE)
    deleted = vst.request("DELETE", f"{API}/sensor/{sensor_id}")
    assert deleted.status_code == 200
    assert deleted.json() is True
    assert vst.request("GET", f"{API}/sensor/list").json() == []
    assert vst.request("GET", f"{API}/sensor/{sensor_id}/streams").status_code == 404
    assert vst.request("DELETE", f"{API}/sensor/{sensor_id}").status_code == 404
    assert grab(url) is None


def test_passwords_never_leave_the_emulator(
    start_vst: Callable[..., VstEmulator], camera: ColourSource
) -> None:
    vst = start_vst()
    url_with_secret = camera.url("red").replace("rtsp://", f"rtsp://viewer:{SECRET}@")
    vst.add("cam", url_with_secret, username="viewer", password=SECRET)
    answers = [
        vst.request("GET", path).text
        for path in (f"{API}/sensor/list", f"{API}/sensor/streams", "/emulator/state")
    ]
    assert "viewer:***@" in answers[0]
    for text in [*answers, vst.stderr()]:
        assert SECRET not in text


def test_sigterm_exits_zero_quickly(
    start_vst: Callable[..., VstEmulator], camera: ColourSource
) -> None:
    vst = start_vst()
    assert_colour(vst.add_live("cam", camera.url("red"))[1], RED)  # a relay is running
    started = time.monotonic()
    vst.process.send_signal(signal.SIGTERM)
    # Within the 10 s that `docker stop` grants (3 s was too tight on two loaded cores).
    assert vst.process.wait(timeout=GRAB_TIMEOUT_S) == 0
    assert time.monotonic() - started < 10.0


def test_bad_knob_exits_2_naming_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VST_EMU_")}
    result = subprocess.run(
        [SYSTEM_PYTHON, "-m", "emulators.vst"],
        cwd=REPO_ROOT,
        env={**env, "VST_EMU_URL_DELAY_S": "soon"},
        capture_output=True,
        text=True,
        timeout=GRAB_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 2
    assert "VST_EMU_URL_DELAY_S" in result.stderr
