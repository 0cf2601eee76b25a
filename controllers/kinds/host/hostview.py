"""One look at a Host's engine, shared by every resource on it for a moment.

A pass over N converged Deployments used to inspect each container, list all containers for
the ports and inspect each image: 5 API calls per Deployment. A view is two list calls per
Host (containers, images) that every plan on that Host reads from. It stays good for
``VIEW_MAX_AGE_S`` at most and is dropped at once when we change anything on the engine
(``DockerEngine.generation``) or when a Docker event arrives for the Host — the event that
wakes a resource also makes its next look fresh, so drift is never hidden by the cache.

The list API says less than an inspect: health and exit code are parsed from the status
text, and the start time is missing (callers that need it inspect that one container).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controllers.clients.docker_client import ContainerInfo, ImageInfo, PortHolder

VIEW_MAX_AGE_S = 2.0
BOUND = ("running", "paused", "restarting")  # states that hold their published ports
_EXITED = re.compile(r"^Exited \((-?\d+)\)")
_HEALTH = re.compile(r"\((healthy|unhealthy|health: starting)\)")


@dataclass(frozen=True)
class HostView:
    containers: Mapping[str, ContainerInfo] = field(default_factory=dict)  # by name
    images: Sequence[ImageInfo] = ()
    published: Sequence[PortHolder] = ()

    def container(self, name: str) -> ContainerInfo | None:
        return self.containers.get(name)

    def image(self, ref: str) -> ImageInfo | None:
        """The local image ``ref`` names (ID, tag, repo digest, or ``name@sha256:<ID>`` as for
        images built here, whose ID is their digest); None if not in this view."""
        wanted = {ref}
        if "@sha256:" in ref:
            wanted.add("sha256:" + ref.split("@sha256:", 1)[1])
        if ":" not in ref.rsplit("/", 1)[-1] and "@" not in ref:
            wanted.add(ref + ":latest")
        for image in self.images:
            if image.id in wanted or wanted & set(image.repo_tags) or wanted & set(
                    image.repo_digests):
                return image
        return None


def container_from_row(row: Mapping[str, Any]) -> ContainerInfo:
    """A ContainerInfo from one row of ``GET /containers/json`` (no start time)."""
    status_text = str(row.get("Status") or "")
    exited = _EXITED.match(status_text)
    health = _HEALTH.search(status_text)
    return ContainerInfo(
        id=str(row.get("Id", "")),
        name=str((row.get("Names") or ["/?"])[0]).lstrip("/"),
        status=str(row.get("State") or "unknown"),
        exit_code=int(exited.group(1)) if exited else 0,
        health=None if health is None else health.group(1).removeprefix("health: "),
        labels=dict(row.get("Labels") or {}),
        image_id=str(row.get("ImageID", "")),
        started_at="",
        network_mode=str((row.get("HostConfig") or {}).get("NetworkMode", "")),
    )


def image_from_row(row: Mapping[str, Any]) -> ImageInfo:
    return ImageInfo(str(row.get("Id", "")), tuple(row.get("RepoTags") or ()),
                     tuple(row.get("RepoDigests") or ()))


def view_from_rows(containers: Sequence[Mapping[str, Any]],
                   images: Sequence[Mapping[str, Any]]) -> HostView:
    infos = [container_from_row(row) for row in containers]
    published = [PortHolder(info.name, info.labels, str(port.get("IP") or ""),
                            int(port["PublicPort"]))
                 for info, row in zip(infos, containers, strict=True) if info.status in BOUND
                 for port in row.get("Ports") or []
                 if port.get("PublicPort") and port.get("Type", "tcp") == "tcp"]
    return HostView({info.name: info for info in infos},
                    [image_from_row(row) for row in images], published)
