"""A typed Docker client: the only module that touches docker-py.

Controllers speak in ``ContainerInfo``/``ContainerRequest``/``ImageInfo``; this module
translates, counts API calls (for metrics and benchmarks) and turns docker-py's exceptions into
our error tree so callers never catch library types.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests.exceptions

from controllers.errors import (
    ControllerError,
    HostUnreachable,
    PermanentError,
    PullFailed,
    TemporaryError,
)
from specs.trust import R_TRUST, enforced

API_TIMEOUT_S = 30
CHANGING_CALLS = frozenset({"container create", "container start", "container rename",
                            "volume create", "volume remove", "archive put",
                            "container stop", "container remove", "image import",
                            "image pull", "image load", "image remove"})
PROBE_LABEL = "rtvi.reconciler/probe"
PROBE_SWEEP_AGE_S = 60.0
MIN_API_VERSION = "1.41"

HTTP_CONFLICT = 409
REMOVAL_IN_PROGRESS = "already in progress"  # Docker's 409 while another removal runs
_FENCE: list[Callable[[str], None] | None] = [None]


def fence_calls(check: Callable[[str], None] | None) -> None:
    """Ask ``check(host name)`` before every Docker call of this process; it raises (a
    ControllerError) to refuse the call. A replica sets it (``reconciler.sharing``): one that
    may have lost its lease, or no longer holds a pass's share, calls no engine at all."""
    _FENCE[0] = check

@dataclass(frozen=True)
class ContainerInfo:
    """What we need to know about one container."""

    id: str
    name: str
    status: str  # created | running | paused | restarting | removing | exited | dead
    exit_code: int
    health: str | None  # starting | healthy | unhealthy | None (no healthcheck)
    labels: dict[str, str]
    image_id: str
    started_at: str
    error: str = ""
    network_mode: str = ""  # "host", "bridge", "default", ...

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def paused(self) -> bool:
        return self.status == "paused"


@dataclass(frozen=True)
class PortHolder:
    """A running container publishing a TCP port on its Host."""

    container: str  # name
    labels: dict[str, str]
    address: str  # host IP as published: "0.0.0.0"/"::"/"" mean every address
    port: int


@dataclass(frozen=True)
class ImageInfo:
    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]


@dataclass
class ContainerRequest:
    """Everything needed to create one container; secrets live only in ``environment`` and
    only for the duration of the create call."""

    name: str
    image: str
    labels: dict[str, str]
    environment: dict[str, str]
    # container port ("8554/tcp") -> (host IP, host port); port None: the engine picks one
    ports: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # source, target, ro
    gpu_ids: list[str] = field(default_factory=list)
    # What the container may do with them: a service computes ("gpu": the driver's default);
    # a run's runner only reads their counters ("gpu", "utility": NVML and nvidia-smi).
    gpu_capabilities: tuple[str, ...] = ("gpu",)
    init: bool = True
    stop_timeout: int = 30
    network_mode: str | None = None  # None: the default bridge
    volumes: list[tuple[str, str]] = field(default_factory=list)  # named volume, target
    command: list[str] | None = None  # None: the image's
    stdin_open: bool = False  # a writer may attach to stdin (``write_stdin``)
    entrypoint: list[str] | None = None  # None: the image's
    workdir: str | None = None  # None: the image's
    stop_signal: str | None = None  # None: the image's (SIGTERM)
    # (trust category, bind source) of every mount a spec named: the operator's policy is
    # asked again on the Host when the container is created (``DockerEngine.create``).
    reads: list[tuple[str, str]] = field(default_factory=list)


Resolver = Callable[[list[str]], list[str]]
"""Paths as a Host resolves them: symlinks followed there, a missing tail kept (what a bind
mount of each would reach)."""


def resolve_here(paths: list[str]) -> list[str]:
    """This machine's resolution: right for an engine on this machine."""
    return [os.path.realpath(path) for path in paths]


class DockerEngine:
    """One Docker engine. Thread-safe (docker-py's client is used under a pool)."""

    def __init__(self, url: str, host_name: str,
                 probe_sweep_age_s: float = PROBE_SWEEP_AGE_S,
                 resolver: Resolver = resolve_here) -> None:
        self.url = url
        self.host_name = host_name
        self.resolver = resolver  # where bind sources are resolved: on the engine's Host
        self.probe_sweep_age_s = probe_sweep_age_s
        self._calls = 0
        self._by_call: Counter[str] = Counter()  # calls per kind of call (health says them)
        self._generation = 0
        self._lock = threading.Lock()
        self._probes_swept = False
        try:
            self._client = docker.DockerClient(base_url=url, version=MIN_API_VERSION,
                                               timeout=API_TIMEOUT_S)
        except docker.errors.DockerException as exc:
            raise HostUnreachable(f"Host {host_name}: cannot reach Docker at {url}: {exc}") from exc

    @property
    def api_calls(self) -> int:
        return self._calls

    def calls_by_kind(self) -> Counter[str]:
        """Calls so far per kind of call (``container list``, ``version``...): where a pass's
        calls went, when their count says more were made than expected."""
        with self._lock:
            return Counter(self._by_call)

    @property
    def generation(self) -> int:
        """Bumped by every call that changes containers or images (a cached view is stale)."""
        return self._generation

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        fence = _FENCE[0]
        if fence is not None:
            fence(self.host_name)  # a replica that does not hold this work: no call made
        with self._lock:
            self._calls += 1
            self._by_call[what] += 1
            if what in CHANGING_CALLS:
                self._generation += 1
        try:
            return fn(*args, **kwargs)
        except docker.errors.NotFound:
            raise
        except docker.errors.APIError as exc:
            message = f"Host {self.host_name}: Docker {what} failed: {exc.explanation or exc}"
            if exc.status_code == HTTP_CONFLICT and REMOVAL_IN_PROGRESS in str(exc.explanation):
                # Someone else (a person's `docker rm -f`) is removing it: gone in a moment.
                raise TemporaryError(f"Host {self.host_name}: the container is being removed "
                                     f"by someone else (Docker {what}: removal already in "
                                     "progress); trying again shortly") from exc
            if exc.status_code is not None and exc.status_code >= 500:
                raise TemporaryError(message) from exc
            raise PermanentError(message) from exc
        except (requests.exceptions.ConnectionError, docker.errors.DockerException,
                requests.exceptions.Timeout) as exc:
            raise HostUnreachable(f"Host {self.host_name}: Docker at {self.url} unreachable "
                                  f"during {what}: {exc}") from exc

    def version(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("version", self._client.version)
        return result

    def image(self, ref: str) -> ImageInfo | None:
        """Resolve a reference to a local image; a ``name@sha256:X`` whose digest is the image
        ID itself also resolves (images built here have no registry digest)."""
        candidates = [ref]
        if "@sha256:" in ref:
            candidates.append("sha256:" + ref.split("@sha256:", 1)[1])
        for candidate in candidates:
            try:
                img = self._call("image inspect", self._client.api.inspect_image, candidate)
            except docker.errors.NotFound:
                continue
            return ImageInfo(img["Id"], tuple(img.get("RepoTags") or ()),
                             tuple(img.get("RepoDigests") or ()))
        return None

    def pull(self, ref: str, auth: dict[str, str] | None,
             on_message: Callable[[dict[str, Any]], None]) -> None:
        """Pull ``ref`` through this engine (its own network: an SSH Host's registry access,
        not ours), calling ``on_message`` with each decoded progress message. ``auth`` goes
        in this one call's header and nowhere else. Raises PullFailed with the registry's
        reason as the engine reports it (refused credentials, an unknown digest, a registry
        down or gone mid-pull, a full disk)."""
        stream: Any = None
        try:
            stream = self._call("image pull", self._client.api.pull, ref, stream=True,
                                decode=True, auth_config=auth)
            for message in stream:
                if not isinstance(message, dict):
                    continue
                if message.get("error"):
                    detail = message.get("errorDetail") or {}
                    raise PullFailed(f"Host {self.host_name}: pulling {ref} failed: "
                                     f"{detail.get('message') or message['error']}")
                on_message(message)  # may give up (PullFailed): the engine then stops too
        except docker.errors.NotFound as exc:
            raise PullFailed(f"Host {self.host_name}: pulling {ref} failed: "
                             f"{exc.explanation or exc}") from None
        except (PermanentError, TemporaryError) as exc:
            if isinstance(exc, PullFailed | HostUnreachable):
                raise
            raise PullFailed(str(exc).replace("Docker image pull failed", f"pulling {ref} "
                                              "failed")) from None
        except (requests.exceptions.RequestException, docker.errors.DockerException,
                OSError) as exc:
            raise PullFailed(f"Host {self.host_name}: pulling {ref} broke off: {exc}") from None
        finally:
            if stream is not None:  # a pull we leave is a pull the engine cancels
                with contextlib.suppress(Exception):
                    stream.close()

    def load(self, path: str) -> None:
        """``docker load`` of a ``docker save`` archive on this machine, streamed to the
        engine (a remote one over its tunnel). Raises PullFailed with the engine's reason."""
        try:
            with open(path, "rb") as data:
                for message in self._call("image load", self._client.api.load_image, data):
                    if isinstance(message, dict) and message.get("error"):
                        raise PullFailed(f"Host {self.host_name}: loading {path} failed: "
                                         f"{message['error']}")
        except OSError as exc:
            raise PullFailed(f"Host {self.host_name}: cannot read {path}: "
                             f"{exc.strerror or exc}") from None
        except (PermanentError, TemporaryError) as exc:
            if isinstance(exc, PullFailed | HostUnreachable):
                raise
            raise PullFailed(str(exc)) from None

    def remove_image(self, image_id: str) -> bool:
        """Remove an image no container uses (never forced: the engine refuses one in use,
        and that refusal is an answer, not an error). Returns whether it is gone."""
        try:
            self._call("image remove", self._client.api.remove_image, image_id, noprune=False)
        except docker.errors.NotFound:
            return True
        except ControllerError:
            return False
        return True

    def registry_digest(self, ref: str, auth: dict[str, str] | None) -> str:
        """The digest the registry serves for ``ref`` now, asked through this engine
        (``GET /distribution/NAME/json``: the registry as the Host reaches it, credentials in
        this call's header only). Raises PullFailed with the registry's reason."""
        try:
            found = self._call("distribution inspect", self._client.api.inspect_distribution,
                               ref, auth_config=auth)
        except docker.errors.NotFound as exc:
            raise PullFailed(f"Host {self.host_name}: the registry has no {ref}: "
                             f"{exc.explanation or exc}") from None
        except (PermanentError, TemporaryError) as exc:
            if isinstance(exc, HostUnreachable):
                raise
            raise PullFailed(str(exc)) from None
        return str((found.get("Descriptor") or {}).get("digest") or "")

    def data_root(self) -> str:
        """Where the engine keeps images (``DockerRootDir``): the disk a pull fills."""
        info = self._call("info", self._client.api.info)
        return str(info.get("DockerRootDir") or "/var/lib/docker")

    def import_image(self, tarball: Path, repository: str, tag: str,
                     changes: list[str]) -> str:
        """``docker import`` of a root-filesystem tarball (streamed from disk, so it also works
        on a remote engine); ``changes`` are Dockerfile-style ENV/LABEL/ENTRYPOINT lines.
        Returns the new image's ID."""
        self._call("image import", self._client.api.import_image, src=str(tarball),
                   repository=repository, tag=tag, changes=changes)
        imported = self.image(f"{repository}:{tag}")
        if imported is None:
            raise TemporaryError(f"Host {self.host_name}: imported {repository}:{tag} "
                                 "but the engine does not list it")
        return imported.id

    def host_port(self, name_or_id: str, container_port: str) -> int | None:
        """The host port the engine published ``container_port`` (e.g. ``8554/tcp``) on; None
        while the container is not running or the port is not published."""
        try:
            data = self._call("container inspect", self._client.api.inspect_container,
                              name_or_id)
        except docker.errors.NotFound:
            return None
        bindings = ((data.get("NetworkSettings") or {}).get("Ports") or {}).get(container_port)
        for binding in bindings or []:
            if str(binding.get("HostPort", "")).isdigit():
                return int(binding["HostPort"])
        return None

    def container(self, name_or_id: str) -> ContainerInfo | None:
        try:
            data = self._call("container inspect", self._client.api.inspect_container, name_or_id)
        except docker.errors.NotFound:
            return None
        return _container_info(data)

    def env_names(self, name_or_id: str) -> list[str] | None:
        """The names (never the values) of a container's environment as it runs: the image's
        own variables included, which a spec never shows. None: no such container."""
        try:
            data = self._call("container inspect", self._client.api.inspect_container, name_or_id)
        except docker.errors.NotFound:
            return None
        env = (data.get("Config") or {}).get("Env") or []
        return sorted({str(item).split("=", 1)[0] for item in env})

    def env_settings(self, name_or_id: str, names: Sequence[str]) -> dict[str, str] | None:
        """The values of a few named, non-secret settings in a container's environment as it
        runs (the image's own included); a name it does not hold is absent. Only the names
        asked for are ever read out (the rest may be secrets). None: no such container."""
        try:
            data = self._call("container inspect", self._client.api.inspect_container, name_or_id)
        except docker.errors.NotFound:
            return None
        wanted = set(names)
        found = {}
        for item in (data.get("Config") or {}).get("Env") or []:
            key, _, value = str(item).partition("=")
            if key in wanted:
                found[key] = value
        return found

    def list_containers(self, labels: dict[str, str]) -> list[ContainerInfo]:
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        rows = self._call("container list", self._client.api.containers, all=True, filters=filters)
        found = []
        for row in rows:
            info = self.container(row["Id"])
            if info is not None:
                found.append(info)
        return found

    def path_in_image(self, image_id: str, path: str) -> bool:
        """Whether ``path`` exists in an image's filesystem. Uses a created-never-started probe
        container (labelled ours, removed at once): Docker has no "stat a path in an image"
        call, and exporting a multi-GB image to look for one file would be far costlier."""
        api = self._client.api
        if not self._probes_swept:
            self._sweep_probes()
        probe = self._call("probe create", api.create_container, image=image_id,
                           command=["true"], labels={PROBE_LABEL: "1"},
                           name=f"rtvi-probe-{secrets.token_hex(6)}")
        try:
            self._call("probe stat", api.get_archive, probe["Id"], path)
            return True
        except docker.errors.NotFound:
            return False
        finally:
            self.remove(probe["Id"])

    def _sweep_probes(self) -> None:
        """Remove probe containers a killed run left behind (older than a minute, so a
        concurrent run's live probe is spared). Once per engine connection."""
        self._probes_swept = True
        leftovers = self._call("probe list", self._client.api.containers, all=True,
                               filters={"label": PROBE_LABEL})
        cutoff = time.time() - self.probe_sweep_age_s
        for item in leftovers:
            if float(item.get("Created", 0)) < cutoff:
                with contextlib.suppress(ControllerError):
                    self.remove(str(item["Id"]))

    def create(self, req: ContainerRequest) -> str:
        self._judge_reads(req)
        api = self._client.api
        host_config = api.create_host_config(
            port_bindings={p: addr for p, addr in req.ports.items()},
            mounts=[docker.types.Mount(target=t, source=s, type="bind", read_only=ro)
                    for s, t, ro in req.mounts]
            + [docker.types.Mount(target=t, source=v, type="volume") for v, t in req.volumes],
            device_requests=[docker.types.DeviceRequest(driver="nvidia", device_ids=req.gpu_ids,
                                                        capabilities=[list(req.gpu_capabilities)])]
            if req.gpu_ids else None,
            init=req.init,
            network_mode=req.network_mode,
        )
        created = self._call(
            "container create", api.create_container, image=req.image, name=req.name,
            labels=req.labels, environment=[f"{k}={v}" for k, v in req.environment.items()],
            ports=[_exposed_port(p) for p in req.ports], host_config=host_config,
            stop_timeout=req.stop_timeout, command=req.command,
            stdin_open=req.stdin_open, entrypoint=req.entrypoint, working_dir=req.workdir,
            stop_signal=req.stop_signal,
        )
        return str(created["Id"])

    def _judge_reads(self, req: ContainerRequest) -> None:
        """The operator's trust policy, asked again where and when a bind is made: a spec's
        path was judged at load on this machine, but Docker follows the path on the Host at
        create time, so a symlink planted there since (or one only the remote Host has) must
        not carry a bind out of its folders. Skipped where no policy is enforced (a library
        caller, a job whose binds its reconciler judged)."""
        policy = enforced()
        if policy is None or not req.reads:
            return
        real = self.resolver([path for _, path in req.reads])
        for (category, path), found in zip(req.reads, real, strict=True):
            if not policy.holds(category, found):
                raise PermanentError(
                    f"container {req.name} not created: {path!r} leads to {found!r} on Host "
                    f"{self.host_name}, outside the folders {category} may be read from "
                    f"({R_TRUST})")

    def start(self, container_id: str) -> None:
        self._call("container start", self._client.api.start, container_id)

    def rename(self, container_id: str, name: str) -> None:
        self._call("container rename", self._client.api.rename, container_id, name)

    def list_rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every container (any state) and every image, as the list API gives them: two
        calls, the whole of what a pass over the Host's resources needs (hostview)."""
        containers = self._call("container list", self._client.api.containers, all=True)
        images = self._call("image list", self._client.api.images)
        return list(containers), list(images)

    def stop(self, container_id: str, timeout: int) -> None:
        try:
            self._call("container stop", self._client.api.stop, container_id, timeout=timeout)
        except docker.errors.NotFound:
            return

    def remove(self, container_id: str) -> None:
        try:
            self._call("container remove", self._client.api.remove_container, container_id,
                       force=True)
        except docker.errors.NotFound:
            return

    def logs(self, container_id: str, tail: int | None = None) -> str:
        try:
            raw = self._call("container logs", self._client.api.logs, container_id,
                             stdout=True, stderr=True, tail=tail if tail is not None else "all")
        except docker.errors.NotFound:
            return ""
        return bytes(raw).decode("utf-8", "replace")

    def follow_logs(self, container_id: str) -> LogFollower:
        """Stream log lines as they are written; close() ends the stream early."""
        stream = self._call("container logs", self._client.api.logs, container_id, stdout=True,
                            stderr=True, stream=True, follow=True)
        return LogFollower(stream)

    def events(self, labels: dict[str, str], since: float | None,
               actions: tuple[str, ...] = ()) -> EventStream:
        """Container events of containers carrying ``labels`` (any container if empty), only
        ``actions`` if given, from ``since`` (unix seconds) on; close() ends the stream.
        Subscribe first, then list: nothing falls in between."""
        filters = {"type": ["container"], "label": [f"{k}={v}" for k, v in labels.items()]}
        if actions:
            filters["event"] = list(actions)
        stream = self._call("events", self._client.api.events, since=since, filters=filters,
                            decode=True)
        return EventStream(stream)

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        self._call("volume create", self._client.api.create_volume, name=name, labels=labels)

    def remove_volume(self, name: str) -> None:
        try:
            self._call("volume remove", self._client.api.remove_volume, name, force=True)
        except docker.errors.NotFound:
            return

    def put_file(self, container_id: str, folder: str, name: str, data: bytes,
                 mode: int = 0o600) -> None:
        """Write one file into a container's ``folder`` (created, not started, is fine): the
        archive API reaches a remote engine too, where this machine's paths mean nothing."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        try:
            self._call("archive put", self._client.api.put_archive, container_id, folder,
                       buffer.getvalue())
        except docker.errors.NotFound as exc:  # the container, or the folder in it
            raise PermanentError(f"Host {self.host_name}: Docker archive put failed: "
                                 f"{exc.explanation or exc}") from exc

    def copy_out(self, container_id: str, path: str, destination: Path) -> bool:
        """Copy ``path`` (a file or folder, running or exited container) into the folder
        ``destination``; False when the path does not exist. Members are extracted with the
        ``data`` filter: no links out, no devices, no absolute paths."""
        try:
            stream, _stat = self._call("archive get", self._client.api.get_archive,
                                       container_id, path)
        except docker.errors.NotFound:
            return False
        with tempfile.TemporaryFile() as spool:
            for chunk in stream:
                spool.write(chunk)
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as tar:
                tar.extractall(destination, filter="data")
        return True

    def write_stdin(self, container_id: str, data: bytes) -> None:
        """Send ``data`` to a container's stdin (created with ``stdin_open``; the engine keeps
        stdin open after we detach, so the process reads up to a delimiter, not to its end).
        Nothing of it is kept or logged."""
        sock = self._call("attach", self._client.api.attach_socket, container_id,
                          params={"stdin": 1, "stream": 1})
        raw = getattr(sock, "_sock", sock)
        try:
            raw.sendall(data)
        except OSError as exc:
            raise TemporaryError(f"Host {self.host_name}: writing to the stdin of "
                                 f"{container_id[:12]} failed: {exc}") from None
        finally:
            sock.close()

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class ContainerEvent:
    action: str  # create, start, die, stop, kill, destroy, oom, health_status: unhealthy, ...
    container_id: str
    labels: dict[str, str]
    time: float  # unix seconds, with nanosecond precision where the engine gives it


class EventStream:
    """Decoded container events; iteration ends when the engine goes away or on close()."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[ContainerEvent]:
        try:
            for raw in self._stream:
                actor = raw.get("Actor") or {}
                nanos = raw.get("timeNano")
                yield ContainerEvent(
                    action=str(raw.get("Action") or raw.get("status") or ""),
                    container_id=str(actor.get("ID") or raw.get("id") or ""),
                    labels=dict(actor.get("Attributes") or {}),
                    time=nanos / 1e9 if nanos else float(raw.get("time") or 0),
                )
        except (requests.exceptions.RequestException, docker.errors.DockerException, OSError,
                AttributeError, ValueError):
            return

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()


class LogFollower:
    """Lines of a followed log stream; iteration ends when the container stops or on close()."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[str]:
        pending = b""
        try:
            for chunk in self._stream:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
        except (requests.exceptions.RequestException, docker.errors.DockerException, OSError,
                AttributeError, ValueError):
            return  # closed under us, or the engine went away: the caller polls state anyway
        if pending:
            yield pending.decode("utf-8", "replace")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()


def _exposed_port(port: str) -> tuple[int, str]:
    """``"19101/tcp"`` as docker-py wants it: a bare string gets ``/tcp`` appended again
    (``"19101/tcp/tcp"``), which exposes nothing, so a port the image does not EXPOSE itself
    was never published."""
    number, _, protocol = port.partition("/")
    return int(number), protocol or "tcp"


def _container_info(data: dict[str, Any]) -> ContainerInfo:
    state = data.get("State") or {}
    health = (state.get("Health") or {}).get("Status")
    return ContainerInfo(
        id=data["Id"],
        name=str(data.get("Name", "")).lstrip("/"),
        status=str(state.get("Status", "unknown")),
        exit_code=int(state.get("ExitCode", 0)),
        health=health,
        labels=dict((data.get("Config") or {}).get("Labels") or {}),
        image_id=str(data.get("Image", "")),
        started_at=str(state.get("StartedAt", "")),
        error=str(state.get("Error", "")),
        network_mode=str((data.get("HostConfig") or {}).get("NetworkMode", "")),
    )


__all__ = ["ContainerInfo", "ContainerRequest", "ControllerError", "DockerEngine", "ImageInfo",
           "PortHolder"]
