"""A live connection to one Host: its Docker engine, its facts, and how to reach its ports.

Local Hosts talk to their socket directly; SSH Hosts go through an ``SshTunnel`` that exposes
the remote Docker socket as a local Unix socket and forwards TCP ports for readiness probes, so
everything above this module treats both alike. A session reconnects on demand: after the
Host comes back, the next ``engine()`` call re-establishes the tunnel.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from controllers.clients.docker_client import DockerEngine
from controllers.clients.http_api import service_url
from controllers.errors import HostUnreachable, PermanentError, TemporaryError
from controllers.kinds.host import gpus as host_probe
from controllers.kinds.host.gputelemetry import (
    DcgmTelemetry,
    NvmlTelemetry,
    SmiStream,
    SmiTelemetry,
    Telemetry,
    nvml_answers,
)
from controllers.kinds.host.hostview import VIEW_MAX_AGE_S, HostView, view_from_rows
from specs.facts import HostFacts
from specs.models import Host

if TYPE_CHECKING:  # asyncssh costs ~0.1 s at start-up; only SSH Hosts need it
    from controllers.clients.ssh import SshTunnel

REALPATH = "realpath"  # coreutils, on the Host's PATH


class HostSession:
    """Thread-safe access to one Host's engine and facts."""

    def __init__(self, host: Host, runtime_dir: Path) -> None:
        self.host = host
        self.name = host.metadata.name
        self._runtime_dir = runtime_dir
        self._lock = threading.RLock()
        self._engine: DockerEngine | None = None
        self._retired: Counter[str] = Counter()  # API calls of engines dropped on reconnect
        self._tunnel: SshTunnel | None = None
        self.facts: HostFacts | None = None
        self.observed_at = 0.0  # monotonic time of the last full observe (facts)
        # The shared view (hostview): when fetched and at which engine generation.
        self._view: HostView | None = None
        self._view_key: tuple[int, int] = (-1, -1)  # (engine id, generation)
        self._view_at = 0.0
        self._view_lock = threading.Lock()
        self._nvml: NvmlTelemetry | None = None  # this machine's, once it answered
        self._nvml_tried = False

    @property
    def spec_key(self) -> str:
        """What identifies the connection; a changed Host spec needs a new session."""
        return self.host.spec.model_dump_json()

    def engine(self) -> DockerEngine:
        with self._lock:
            if self._tunnel is not None and not self._tunnel.connected:
                self._drop_engine()
            if self._engine is None:
                url = self._docker_url()
                self._engine = DockerEngine(url, self.name) if self._tunnel is None else \
                    DockerEngine(url, self.name, resolver=self._resolve_there)
            return self._engine

    def _resolve_there(self, paths: list[str]) -> list[str]:
        """Paths as the remote Host resolves them (``realpath -m`` over its SSH connection):
        its symlinks, not this machine's, decide where a bind there leads."""
        tunnel = self._tunnel
        if tunnel is None:
            raise HostUnreachable(f"Host {self.name}: no SSH connection to resolve paths")
        status, out, err = tunnel.run([REALPATH, "-m", "--", *paths])
        found = out.splitlines()
        if status != 0 or len(found) != len(paths):
            said = (err.strip().splitlines() or ["no answer"])[-1]
            raise TemporaryError(f"Host {self.name}: cannot resolve bind sources with "
                                 f"{REALPATH} -m (exit {status}): {said[:200]}")
        return found

    def _docker_url(self) -> str:
        if not self.host.is_ssh:
            return self.host.spec.docker
        ssh = self.host.spec.ssh
        if ssh is None:
            raise PermanentError(f"Host {self.name}: ssh:// engines need spec.ssh with keyFile "
                                 "and knownHostsFile (host keys are never auto-accepted)")
        if self._tunnel is None:
            from controllers.clients.ssh import SshTunnel

            self._runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._tunnel = SshTunnel(self.name, self.host.spec.docker, ssh.keyFile,
                                     ssh.knownHostsFile, ssh.socket, self._runtime_dir)
        return self._tunnel.start()

    def observe(self) -> HostFacts:
        """Engine version and GPUs, freshly read; raises HostUnreachable when it is down."""
        engine = self.engine()
        try:
            version = engine.version()
        except HostUnreachable:
            with self._lock:
                self._drop_engine()
            raise
        if self._tunnel is not None:
            gpus, probe = host_probe.remote_gpus(self._tunnel)
        else:
            gpus, probe = host_probe.local_gpus()
        facts = HostFacts(
            name=self.name,
            engine_version=str(version.get("Version", "?")),
            api_version=str(version.get("ApiVersion", "?")),
            os=f"{version.get('Os', '?')}/{version.get('Arch', '?')}",
            gpus=gpus,
            gpu_probe=probe,
        )
        self.facts = facts
        self.observed_at = time.monotonic()
        return facts

    def view(self) -> HostView:
        """Containers and images of the Host, shared for VIEW_MAX_AGE_S at most, never across
        a change we made (the engine's generation) or an event (``invalidate``)."""
        engine = self.engine()
        with self._view_lock:  # one fetch at a time: a sweep's passes share it, not race it
            with self._lock:
                key = (id(engine), engine.generation)
                fresh = time.monotonic() - self._view_at < VIEW_MAX_AGE_S
                if self._view is not None and self._view_key == key and fresh:
                    return self._view
            try:
                containers, images = engine.list_rows()
            except HostUnreachable:
                with self._lock:
                    self._drop_engine()
                raise
            view = view_from_rows(containers, images)
            with self._lock:
                self._view, self._view_key, self._view_at = view, key, time.monotonic()
            return view

    def invalidate(self) -> None:
        """Something happened on the Host (a Docker event): the next look is fresh."""
        with self._lock:
            self._view = None

    def gpu_processes(self) -> dict[str, int]:
        """GPU memory in use per UUID by compute processes on the Host (rule 10 waits)."""
        if self._tunnel is None:
            return host_probe.gpu_processes()
        status, out, _ = self._tunnel.run(["nvidia-smi", f"--query-compute-apps="
                                           f"{host_probe.APPS_QUERY}",
                                           "--format=csv,noheader,nounits"])
        return host_probe.parse_apps_csv(out) if status == 0 else {}

    def telemetry(self, dcgm_url: str | None = None, interval_s: float = 1.0) -> Telemetry:
        """The Host's GPU telemetry: the DCGM exporter at ``dcgm_url`` when given; else NVML
        when this machine is the Host and NVML answers, else ``nvidia-smi`` on the Host (for a
        remote one, one ``nvidia-smi`` printing every ``interval_s`` over its SSH connection,
        never a command per sample). Reading it may still fail: the caller records why, never
        a zero."""
        if dcgm_url is not None:
            return DcgmTelemetry(dcgm_url)
        where = f"Host {self.name}"
        if self.host.is_ssh:
            self.engine()  # opens the tunnel whose connection runs the command
            tunnel = self._tunnel
            assert tunnel is not None
            return SmiStream(tunnel.stream, tunnel.run, interval_s, where)
        with self._lock:
            if self._nvml is None and not self._nvml_tried:
                self._nvml_tried = True  # a machine without NVML does not grow one
                if nvml_answers() is None:
                    self._nvml = NvmlTelemetry()
            return self._nvml if self._nvml is not None else SmiTelemetry(where=where)

    def free_bytes(self, path: str) -> int | None:
        """Room left (bytes an unprivileged writer gets) on the filesystem of ``path`` on the
        Host; None when it cannot be told (the caller says so rather than guessing)."""
        if self._tunnel is None:
            try:
                found = os.statvfs(path)
            except OSError:
                return None
            return found.f_bavail * found.f_frsize
        self.engine()  # opens the tunnel whose connection runs the command
        tunnel = self._tunnel
        assert tunnel is not None
        status, out, _ = tunnel.run(["df", "-P", "-B1", "--", path])
        lines = out.strip().splitlines()
        fields = lines[-1].split() if status == 0 and len(lines) >= 2 else []
        return int(fields[3]) if len(fields) >= 4 and fields[3].isdigit() else None

    def url_for(self, address: str, port: int) -> str:
        """A URL that reaches ``address:port`` as the Host sees it."""
        if self._tunnel is None:
            return service_url(address, port)
        target = "127.0.0.1" if address in ("0.0.0.0", "::") else address
        local_host, local_port = self._tunnel.forward_tcp(target, port)
        return f"http://{local_host}:{local_port}"

    @property
    def api_calls(self) -> int:
        """Docker API calls made through this session, across reconnects (for metrics)."""
        return self.calls_by_kind().total()

    def calls_by_kind(self) -> Counter[str]:
        """Those calls per kind of call (``health`` says them), across reconnects."""
        engine = self._engine
        return self._retired + (engine.calls_by_kind() if engine is not None else Counter())

    def _drop_engine(self) -> None:
        if self._engine is not None:
            self._retired += self._engine.calls_by_kind()
            self._engine.close()
            self._engine = None

    def close(self) -> None:
        with self._lock:
            self._drop_engine()
            if self._tunnel is not None:
                self._tunnel.close()
                self._tunnel = None
