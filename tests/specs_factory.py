"""Write Host/Deployment spec files for tests (real files, real YAML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HOST = {"apiVersion": "rtvi.reconciler/v1", "kind": "Host", "metadata": {"name": "local"},
        "spec": {"docker": "unix:///var/run/docker.sock"}}


def deployment(name: str, image: str, port: int, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "host": "local",
        "image": image,
        "model": {"use": "vllm-compatible", "path": "ngc:nim/nvidia/test-model:1.0"},
        "port": {"host": port},
        "readiness": {"timeoutSeconds": 120, "pollSeconds": 0.2},
    }
    body.update(spec)
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Deployment",
            "metadata": {"name": name}, "spec": body}


def pinned(image_id: str) -> str:
    """A digest-pinned reference to a locally built image (its ID is its content digest)."""
    return f"rtvi-emulator@{image_id}"


def write(directory: Path, *docs: dict[str, Any], name: str = "specs.yaml",
          host: bool = True) -> Path:
    """Write docs (after the local Host unless ``host`` is off) to one multi-document file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump_all([HOST, *docs] if host else list(docs), sort_keys=False))
    return path
