"""Every request the product sends RTVI, and every answer it got, conforms to the OpenAPI.

One StreamSet life cycle with captions against a recording emulator that answers in the spec's
own (wrapped) caption shape: registration, steady state, caption sessions, teardown. Then every
exchange the emulator recorded goes through the spec validator. A request body the product
builds wrong, or a field it reads that the spec does not have, fails here.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.conftest import Cli
from tests.contract.openapi import violations
from tests.e2e.stream_helpers import colours, rtvi_deployment, sources, status, streamset
from tests.ports import free_port
from tests.specs_factory import write

CAPTIONS = {"prompt": "What colour fills the frame?", "chunkDuration": 1, "maxTokens": 32,
            "maxCaptionAgeSeconds": 20}


def test_the_product_speaks_the_published_api(cli: Cli, emulator_image: str,
                                              tmp_path: Any) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, port, RTVI_EMU_RECORD="/tmp/exchanges.jsonl",
                                 RTVI_EMU_CAPTION_SHAPE="wrapped"),
          streamset(colours(["RED", "BLUE"]), captions=CAPTIONS))
    applied = cli("apply", str(specs), "--timeout", "150")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    found = sources(status(cli, "StreamSet/cams"))
    # The spec's wrapped caption events were read (chunks counted), not silently dropped.
    assert all(fact.get("captionChunks", 0) >= 1 for fact in found.values()), found
    again = cli("apply", str(specs))  # the steady state's requests too
    assert again.returncode == 0, again.stdout + again.stderr
    deleted = cli("delete", "StreamSet/cams")  # teardown: captions stopped, batch delete
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr

    record = httpx.get(f"http://127.0.0.1:{port}/emulator/exchanges", timeout=10).json()
    exchanges = record["exchanges"]
    seen = {(e["method"], e["path"].split("/")[2]) for e in exchanges}  # /v1/<this>/...
    assert {("POST", "streams"), ("GET", "streams"), ("DELETE", "streams"),
            ("POST", "generate_captions"), ("GET", "health"), ("GET", "models")} <= seen, seen
    assert violations(exchanges) == []
    # Teardown asks for a blocking batch delete (a non-blocking one answers before the streams
    # are gone; the emulator honours the difference).
    batches = [e["request_body"] for e in exchanges
               if (e["method"], e["path"]) == ("DELETE", "/v1/streams/delete-batch")]
    assert batches, batches
    assert all(b.get("blocking") is True for b in batches), batches


def test_an_experiment_run_speaks_the_published_api(cli: Cli, emulator_image: str,
                                                    tmp_path: Any) -> None:
    """A canary's requests (registration, forced-choice captions in the spec's wrapped shape,
    the 1-frame 1-token smoke, the performance part, blocking batch deletes, asset stats)
    against its own fresh service, recorded to a mount."""
    from tests.contract.openapi import read_records
    from tests.e2e.test_experiment import canary

    recorded = tmp_path / "rec"
    recorded.mkdir()
    template = rtvi_deployment(emulator_image, free_port(), RTVI_EMU_RECORD="/rec/x.jsonl",
                               RTVI_EMU_CAPTION_SHAPE="wrapped")
    template["spec"]["mounts"] = [{"source": str(recorded), "target": "/rec", "readOnly": False}]
    specs = tmp_path / "specs"
    write(specs, template, canary("contract-1", free_port(), streams=2, smoke=True))
    applied = cli("apply", str(specs), "--timeout", "200", timeout=260)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    gates = json.loads((cli.state_dir / "evidence" / "contract-1" / "status.json").read_text())
    assert gates["result"] == "PASS"
    exchanges = read_records(recorded / "x.jsonl")
    seen = {(e["method"], e["path"]) for e in exchanges}
    assert {("POST", "/v1/streams/add"), ("DELETE", "/v1/streams/delete-batch"),
            ("POST", "/v1/generate_captions"), ("GET", "/v1/assets/stats")} <= seen, seen
    assert violations(exchanges) == []
