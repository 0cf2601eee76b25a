"""A service that enforces bearer auth: every request we send carries the token, nothing shows it.

RTVI declares bearer security on every operation. The emulator enforces a token when
``RTVI_EMU_API_TOKEN`` is set (here: as a secret of the Deployment, which also names it in
``spec.apiTokenSecret``): readiness, stream registration and caption sessions must all send it.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import docker

from tests.conftest import Cli
from tests.e2e.stream_helpers import colours, rtvi_deployment, sources, status, streamset
from tests.ports import free_port
from tests.specs_factory import write

CAPTIONS = {"prompt": "What colour fills the frame?", "chunkDuration": 1, "maxTokens": 32,
            "maxCaptionAgeSeconds": 20}


def _token_deployment(image_id: str, port: int, token_file: Path,
                      name_it: bool) -> dict[str, object]:
    dep = rtvi_deployment(image_id, port)
    spec = dep["spec"]
    spec["secrets"] = [{"name": "RTVI_EMU_API_TOKEN", "fromFile": str(token_file)}]
    if name_it:
        spec["apiTokenSecret"] = "RTVI_EMU_API_TOKEN"
    return dep


def test_every_request_carries_the_token_and_no_output_shows_it(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    token = "canary-token-" + secrets.token_hex(12)
    token_file = tmp_path / "rtvi_token"
    token_file.write_text(token + "\n")
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, _token_deployment(emulator_image, port, token_file, name_it=True),
          streamset(colours(["RED", "GREEN"]), captions=CAPTIONS))
    outputs = [cli("plan", str(specs)), cli("apply", str(specs), "--timeout", "150")]
    assert outputs[1].returncode == 0, outputs[1].stdout + outputs[1].stderr
    data = status(cli, "StreamSet/cams")
    found = sources(data)
    assert all(fact.get("registered") for fact in found.values()), found
    assert all(fact.get("captionChunks", 0) >= 1 for fact in found.values()), found  # captions too
    outputs += [cli("apply", str(specs)), cli("status"), cli("status", "cams", "-o", "json"),
                cli("events")]
    for done in outputs:
        assert token not in done.stdout + done.stderr
    state = b"".join(p.read_bytes() for p in sorted(cli.state_dir.rglob("*")) if p.is_file())
    assert token.encode() not in state
    for container in docker_client.containers.list(all=True, filters={"label": [
            f"rtvi.reconciler/instance={cli.instance}"]}):
        attrs = container.attrs
        del attrs["Config"]["Env"]  # the service's own env holds it, as a secret must
        assert token not in json.dumps(attrs) + json.dumps(container.labels)


def test_a_service_that_wants_a_token_says_so(cli: Cli, emulator_image: str,
                                              tmp_path: Path) -> None:
    token_file = tmp_path / "rtvi_token"
    token_file.write_text("canary-token-" + secrets.token_hex(12) + "\n")
    specs = tmp_path / "specs"
    write(specs, _token_deployment(emulator_image, free_port(), token_file, name_it=False))
    done = cli("apply", str(specs), "--timeout", "20")
    assert done.returncode != 0
    assert "401: the service wants an API token; name its secret in spec.apiTokenSecret" in (
        done.stdout + done.stderr), done.stdout + done.stderr
