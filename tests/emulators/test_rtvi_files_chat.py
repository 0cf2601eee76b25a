"""Files, chat completions, asset stats and metrics of the RTVI emulator.

Uploaded media are made by the host's ffmpeg (a solid-colour PNG), so the chat answer proves the
emulator decoded the uploaded bytes rather than echoing a name.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.emulators import rtvi_client as rc
from tests.emulators.helpers import EmulatorProcess
from tests.emulators.rtsp_source import RtspSource

StartEmulator = Callable[..., EmulatorProcess]


def _png(path: Path, colour: str) -> bytes:
    subprocess.run(
        [
            "ffmpeg",
            "-nostdin",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            f"color=c={colour}:s=64x48",
            "-frames:v",
            "1",
            "-y",
            str(path),
        ],
        check=True,
        timeout=30,
    )
    return path.read_bytes()


def _chat(target: str | None, text: str = "What colour is it?") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": rc.MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
    }
    if target is not None:
        body["id"] = target
    return body


def test_upload_chat_about_the_file_and_delete(
    start_emulator: StartEmulator, tmp_path: Path
) -> None:
    emulator = start_emulator()
    emulator.wait_ready()
    data = _png(tmp_path / "magenta.png", "0xFF00FF")
    with rc.client(emulator) as http:
        form = {"purpose": "vision", "media_type": "image"}
        uploaded = http.post("/v1/files", data=form, files={"file": ("m.png", data, "image/png")})
        assert uploaded.status_code == 200, uploaded.text
        record = uploaded.json()
        assert (record["purpose"], record["bytes"], record["filename"]) == (
            "vision",
            len(data),
            "m.png",
        )
        listed = http.get("/v1/files", params={"purpose": "vision"}).json()["data"]
        assert [f["id"] for f in listed] == [record["id"]]
        assert http.get(f"/v1/files/{record['id']}/content").content == data
        stats = http.get("/v1/assets/stats").json()
        assert stats["files"] == {"count": 1, "bytes": len(data)}
        assert stats["storage_bytes"] == len(data)

        answer = http.post("/v1/chat/completions", json=_chat(record["id"]))
        assert answer.status_code == 200, answer.text
        message = answer.json()["choices"][0]["message"]
        assert message == {"role": "assistant", "content": "The frame shows solid MAGENTA."}

        bad = http.post(
            "/v1/files", data={"purpose": "fun", "media_type": "image"}, files={"file": ("x", b"x")}
        )
        assert bad.status_code == 422
        assert http.delete(f"/v1/files/{record['id']}").json()["deleted"] is True
        assert http.delete(f"/v1/files/{record['id']}").status_code == 400  # no 404 in the spec
        assert http.get("/v1/assets/stats").json()["files"] == {"count": 0, "bytes": 0}


def test_chat_about_a_stream_echo_and_sse(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = start_emulator()
    emulator.wait_ready()
    stream_id = rc.new_id()
    with rc.client(emulator) as http:
        rc.add(http, rc.entry(rtsp_source.url("green"), stream_id))
        rc.wait_decoding(http, stream_id, frames=1)
        answer = http.post("/v1/chat/completions", json=_chat(stream_id)).json()
        assert answer["choices"][0]["message"]["content"] == "The frame shows solid GREEN."
        echo = http.post("/v1/chat/completions", json=_chat(None, "hello there")).json()
        assert echo["choices"][0]["message"]["content"] == "You said: hello there"
        with http.stream(
            "POST", "/v1/chat/completions", json={**_chat(stream_id), "stream": True}
        ) as streamed:
            events = list(rc.sse_events(streamed))
        assert events[-1] == "[DONE]"
        first = events[0]
        assert isinstance(first, dict)
        assert first["object"] == "chat.completion.chunk"
        strict = http.post("/v1/chat/completions", json={**_chat(None), "bogus": True})
        assert strict.status_code == 422
        missing = http.post("/v1/chat/completions", json=_chat(rc.new_id()))
        assert missing.status_code == 400
        metrics = http.get("/v1/metrics").text
        for name in (
            "rtvi_emulator_active_streams 1",
            "rtvi_emulator_caption_requests 0",
            "rtvi_emulator_chunks_total 0",
        ):
            assert name in metrics, metrics
        # No 5xx but the readiness probe's 503 while the model loads (a loaded machine's first
        # probe can land then): every route's count by status is in the text.
        failed = [line for line in metrics.splitlines()
                  if line.startswith("rtvi_emulator_requests_total{") and 'status="5' in line]
        assert all('path="/v1/health/ready"' in line for line in failed), failed
        (errors,) = [line for line in metrics.splitlines()
                     if line.startswith("rtvi_emulator_errors_total ")]
        assert int(errors.split()[1]) == sum(int(line.split()[-1]) for line in failed)
        decoded = [
            line
            for line in metrics.splitlines()
            if line.startswith("rtvi_emulator_decoded_frames_total ")
        ]
        assert decoded
        assert float(decoded[0].split()[1]) >= 1
