"""The registry-free emulator image, against the real Docker engine.

Containers publish on 127.0.0.1 only (Docker picks the free port) or run without a network, carry
the run's labels, and are removed by the session fixture's teardown.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from emulators import image
from tests.emulators import rtvi_client as rc
from tests.emulators.helpers import LOOPBACK, REPO_ROOT, TestImages, docker, http_client, wait_for
from tests.emulators.rtsp_source import RtspSource
from tests.ports import free_port

pytestmark = pytest.mark.docker

IMAGE_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
HEALTHY_WAIT_S = 20.0
CANARY = "nvapi-CANARY-image-5150"


def _run(images: TestImages, *args: str) -> str:
    return docker("run", "-d", "--init", *images.label_args(), *args).strip()


def _health(container: str) -> str:
    return docker("inspect", "--format", "{{.State.Health.Status}}", container).strip()


def _state(container: str, field: str) -> str:
    return docker("inspect", "--format", f"{{{{.State.{field}}}}}", container).strip()


def test_image_id_and_metadata(emulator_image: TestImages) -> None:
    assert IMAGE_ID_RE.match(emulator_image.image_id)
    [inspected] = json.loads(docker("image", "inspect", emulator_image.tag))
    assert inspected["Id"] == emulator_image.image_id
    config = inspected["Config"]
    assert config["Labels"]["org.opencontainers.image.title"] == "rtvi-emulator"
    assert config["Entrypoint"] == ["python3", "-m", "emulators.rtvi"]
    assert config["ExposedPorts"] == {"8000/tcp": {}}
    assert {"PYTHONPATH=/opt/emu", "PYTHONUNBUFFERED=1"} <= set(config["Env"])
    health = config["Healthcheck"]
    assert health["Test"][:4] == ["CMD", "python3", "-S", "-E"]
    assert "/v1/health/ready" in health["Test"][5]
    second = 1_000_000_000
    assert (health["Interval"], health["Timeout"], health["StartPeriod"], health["Retries"]) == (
        second,
        2 * second,
        600 * second,
        3,
    )


def test_container_serves_and_turns_healthy(emulator_image: TestImages) -> None:
    container = _run(
        emulator_image,
        "-p",
        f"{LOOPBACK}::8000",
        "-e",
        "VLM_MODEL_TO_USE=cosmos-reason1",
        "-e",
        f"NGC_API_KEY={CANARY}",
        "-e",
        "RTVI_EMU_STARTUP_DELAY_S=0.3",
        emulator_image.tag,
    )
    published = docker("port", container, "8000/tcp").split()[0]
    assert published.startswith(f"{LOOPBACK}:")
    base_url = f"http://{published}"

    def ready() -> bool | None:
        try:
            with http_client(base_url) as client:
                return True if client.get("/v1/health/ready").status_code == 200 else None
        except httpx.TransportError:
            return None

    wait_for(ready, what="the containerised emulator to be ready")
    with http_client(base_url) as client:
        [model] = client.get("/v1/models").json()["data"]
        assert model["id"] == "cosmos-reason1"
        assert client.get("/v1/metadata").json() == {"version": "3.2.1"}

    def healthy() -> bool | None:
        status = _health(container)
        assert status in ("starting", "healthy"), status
        return True if status == "healthy" else None

    wait_for(healthy, HEALTHY_WAIT_S, "Docker to report the container healthy")
    docker("stop", "-t", "5", container, timeout=30)
    # 0 (not 137) proves the emulator handled SIGTERM itself, within the grace period.
    assert _state(container, "ExitCode") == "0"
    logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True, check=True)
    assert "INFO:     Application startup complete." in logs.stdout
    assert "Initializing a V1 LLM engine" in logs.stdout
    assert CANARY not in logs.stdout + logs.stderr


def test_fatal_container_exits_1_with_marker_in_logs(emulator_image: TestImages) -> None:
    marker = "CUDA out of memory"
    container = _run(
        emulator_image,
        "--network",
        "none",
        "-e",
        f"RTVI_EMU_FATAL={marker}",
        "-e",
        "RTVI_EMU_FATAL_AFTER_S=0.2",
        emulator_image.tag,
    )
    exit_code = docker("wait", container, timeout=30).strip()
    assert exit_code == "1"
    logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True, check=True)
    assert marker in logs.stderr
    assert "Application startup complete" not in logs.stdout
    assert _health(container) != "healthy"


def test_image_holds_only_python_stdlib_busybox_and_the_emulator(
    emulator_image: TestImages,
) -> None:
    script = (
        "python3 -c 'import sys, ssl, sqlite3, decimal, lzma, bz2, ctypes, zoneinfo, hashlib, "
        "json; print(sys.version_info[:2])' && "
        "ls /opt/emu/emulators && "
        "ls -d /usr/lib/python3.11/site-packages /usr/lib/python3.11/test 2>&1; "
        'python3 -c \'import os; print(*(os.readlink(p) for p in ("/lib", "/lib64", "/bin")))\''
    )
    output = docker(
        "run",
        "--rm",
        "--network",
        "none",
        *emulator_image.label_args(),
        "--entrypoint",
        "sh",
        emulator_image.tag,
        "-c",
        script,
    )
    lines = output.splitlines()
    assert lines[0] == "(3, 11)"
    assert sorted(lines[1:3]) == ["__init__.py", "rtvi"]
    assert "No such file" in lines[3]
    assert "No such file" in lines[4]
    assert lines[5:] == ["usr/lib usr/lib64 usr/bin"]


def test_second_base_build_is_a_no_op(emulator_image: TestImages) -> None:
    first = image.ensure_base_image(emulator_image.base_repository, emulator_image.labels)
    before = docker("image", "inspect", "--format", "{{.Id}}", first.tag).strip()
    second = image.ensure_base_image(emulator_image.base_repository, emulator_image.labels)
    assert second == image.BaseImage(first.tag, imported=False)
    assert docker("image", "inspect", "--format", "{{.Id}}", second.tag).strip() == before
    tags = docker(
        "images", "--format", "{{.Repository}}:{{.Tag}}", emulator_image.base_repository
    ).split()
    assert tags == [first.tag]
    parent_chain = docker("history", "-q", emulator_image.tag).split()
    assert before.removeprefix("sha256:")[:12] in parent_chain


def test_cli_prints_the_image_id_last(emulator_image: TestImages) -> None:
    labels = [
        arg for key, value in emulator_image.labels.items() for arg in ("--label", f"{key}={value}")
    ]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "emulators.image",
            "--base-repository",
            emulator_image.base_repository,
            *labels,
            "build-emulator",
            "--tag",
            emulator_image.tag,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert IMAGE_ID_RE.match(last)
    assert last == docker("image", "inspect", "--format", "{{.Id}}", emulator_image.tag).strip()
    assert "exists; reusing it" in result.stderr


@pytest.mark.parametrize(
    ("constant", "package"),
    [
        ("BUSYBOX_BINARY", "busybox-static"),
        ("PYTHON_BINARY", "python3.11"),
        ("FFMPEG_BINARY", "ffmpeg"),
    ],
)
def test_missing_host_files_name_the_debian_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, constant: str, package: str
) -> None:
    monkeypatch.setattr(image, constant, tmp_path / "absent")
    with pytest.raises(image.ImageBuildError, match=re.escape(f"Debian package {package}")):
        image.build_base_image("local/rtvi-pybase-never-built")


def test_container_on_host_network_decodes_rtsp(
    emulator_image: TestImages, rtsp_source: RtspSource
) -> None:
    """The image's own ffmpeg (no host /usr mounted) decodes a loopback RTSP source."""
    port = free_port()
    container = _run(
        emulator_image,
        "--network",
        "host",
        "-e",
        f"RTVI_EMU_PORT={port}",
        "-e",
        f"RTVI_EMU_HOST={LOOPBACK}",
        emulator_image.tag,
    )
    base_url = f"http://{LOOPBACK}:{port}"

    def ready() -> bool | None:
        try:
            with http_client(base_url) as client:
                return True if client.get("/v1/health/ready").status_code == 200 else None
        except httpx.TransportError:
            assert _state(container, "Running") == "true", docker("logs", container)
            return None

    wait_for(ready, what="the containerised emulator to be ready")
    stream_id = rc.new_id()
    with httpx.Client(base_url=base_url, timeout=30.0, trust_env=False) as client:
        added = rc.add(client, rc.entry(rtsp_source.url("blue-yellow"), stream_id))
        assert added.json()["results"] == [{"id": stream_id}], added.text
        rc.wait_decoding(client, stream_id, frames=1)
        answer = client.post(
            "/v1/generate_captions", json=rc.caption_body(stream_id, chunk_duration=1)
        )
        assert answer.status_code == 200, answer.text
        chunk = rc.chunk_of(answer.json())
        assert chunk["content"] == "The frame shows BLUE with a YELLOW border."
        assert chunk["frame_count"] >= 1
    ffmpeg = docker("exec", container, "sh", "-c", "ps")
    assert "ffmpeg" in ffmpeg
    docker("stop", "-t", "5", container, timeout=30)
    assert _state(container, "ExitCode") == "0"
