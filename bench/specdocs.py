"""The spec documents every bench writes: the local Host and N emulator Deployments.

One builder, so that the benches compare the same services (a bench that drifts to another
readiness gate or image reference measures something else)."""

from __future__ import annotations

API = "rtvi.reconciler/v1"


def host_doc() -> dict[str, object]:
    return {"apiVersion": API, "kind": "Host", "metadata": {"name": "local"}}


def deployment_doc(i: int, image_id: str, port: int, *, timeout_s: int = 300,
                   poll_s: float = 0.2, env: dict[str, str] | None = None) -> dict[str, object]:
    """Emulator Deployment ``bench-<i>`` on ``port``, pinned to the locally built image."""
    spec: dict[str, object] = {
        "host": "local", "image": f"rtvi-emulator@{image_id}",
        "model": {"use": "vllm-compatible", "path": "ngc:nim/nvidia/bench:1"},
        "port": {"host": port},
        "readiness": {"timeoutSeconds": timeout_s, "pollSeconds": poll_s}}
    if env:
        spec["env"] = env
    return {"apiVersion": API, "kind": "Deployment", "metadata": {"name": f"bench-{i}"},
            "spec": spec}
