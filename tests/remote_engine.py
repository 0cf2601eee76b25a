"""A second, "remote" Docker engine behind a real sshd on loopback, for tests of SSH Hosts.

What it is: a second ``dockerd`` (own ``--data-root``, ``--exec-root``, ``--pidfile``, ``-H``
socket, its own managed containerd and containerd namespace) on its own Linux bridge with an
unused private /24, and an OpenSSH ``sshd`` on ``127.0.0.1:<free port>`` that lets root in by an
ed25519 key and allows stream-local (Unix socket) and TCP forwarding. ``known_hosts`` holds the
generated host key, so clients can be strict. Everything lives under ``/tmp/rtvi-remote/<id>/``
(short: Unix socket paths must stay under 108 bytes).

Why these engine flags (measured on Debian 12, engine 20.10):
- ``--bridge=<own bridge>``: the default bridge name is ``docker0``, which the main engine owns.
  Docker creates only ``docker0`` itself; any other name must exist first, so we create it with
  ``ip link add … type bridge`` plus an address. (Never ``--bridge=none``: it deletes docker0.)
- ``--iptables=false``: with iptables on, a starting engine flushes and re-creates the shared
  ``DOCKER*`` chains and would drop the main engine's rules. Publishing on 127.0.0.1 still works
  through the userland proxy (``docker-proxy`` listens on the host and dials the container over
  the local bridge, no forwarding involved). ``--ip-forward=false`` for the same reason: no host
  settings touched.
- ``--dns 127.0.0.1``: no DNS queries leave the machine.
- ``--containerd-namespace``: separate even if someone starts a system containerd later.

Why an owner record and a lock: a killed pytest leaves both daemons (and container shims)
running. Each instance records its owner's PID and process start time; on start, instances whose
owner is gone are cleaned: a live dockerd is stopped, a killed one is restarted on its own dirs so
it can reap its containers and then stopped, leftover mounts are unmounted, the bridge deleted.
The lock keeps a concurrent session from cleaning an instance that is still being created.

Use from pytest (session fixture)::

    from tests.remote_engine import RemoteEngine, remote_engine_fixture  # noqa: F401
    def test_x(remote_engine: RemoteEngine) -> None: ...

or from a script: ``with RemoteEngine() as engine: ...``, or ``scripts/remote-engine.sh serve``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from controllers.clients.ssh import SshTunnel
from controllers.waiting import until
from tests.ports import free_port

BASE_DIR = Path(os.environ.get("RTVI_REMOTE_ENGINE_DIR", "/tmp/rtvi-remote"))
LOCK_NAME = ".lock"
STATE_NAME = "state.json"
BRIDGE_PREFIX = "rtvr"  # + 6 hex: within the 15-character interface name limit
SUBNET_POOL = ipaddress.IPv4Network("10.213.0.0/16")  # carved into /24s, one per instance
SSH_USER = "root"
LOOPBACK = "127.0.0.1"
SSHD = "/usr/sbin/sshd"  # sshd re-executes itself and insists on an absolute path
SSHD_PRIVSEP_DIR = Path("/run/sshd")
SSH_KEYGEN = "ssh-keygen"
DOCKERD = "dockerd"
DOCKER_CLI = "docker"
LABEL_TEST = "rtvi.test"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.02
SHUTDOWN_TIMEOUT_S = 3  # dockerd's grace for containers on stop
LOG_TAIL_CHARS = 2000
INSTALL_HINT = {
    SSHD: "apt-get install -y --no-install-recommends openssh-server",
    DOCKERD: "apt-get install -y docker.io",
}


class RemoteEngineError(RuntimeError):
    """The second engine or its sshd could not be set up; the message says why."""


# --- small process and network helpers ----------------------------------------------------


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until true; no fixed sleeps, only short polls."""
    if until(lambda: True if predicate() else None, timeout_s=timeout_s, pace=POLL_S) is None:
        raise RemoteEngineError(f"timed out after {timeout_s:g} s waiting for {what}")


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 onwards), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw.rpartition(")")[2].split()


def _process_alive(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")  # zombies count as gone


def _start_time(pid: int) -> str | None:
    stat = _proc_stat(pid)
    return stat[19] if stat is not None else None  # field 22: start time in clock ticks


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        stat = _proc_stat(pid)
        if stat is not None:
            children.setdefault(int(stat[1]), []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _pids_mentioning(root: Path) -> list[int]:
    """Processes whose command line names a path under ``root`` (daemons, containerd, shims)."""
    marker = str(root) + "/"
    return [pid for pid in _all_pids() if pid != os.getpid()
            and any(marker in arg for arg in _cmdline(pid))]


def _terminate(pids: list[int], timeout_s: float) -> None:
    """SIGTERM, wait until gone, SIGKILL what is left (and wait for that too)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if until(lambda: None if any(_process_alive(p) for p in pids) else True,
                 timeout_s=timeout_s, pace=POLL_S):
            return


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        raise RemoteEngineError(f"{' '.join(argv)} failed ({done.returncode}): "
                                f"{(done.stderr or done.stdout).strip()}")
    return done


def _docker_ping(sock_path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            sock.connect(str(sock_path))
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status_line = sock.recv(64).split(b"\r\n", 1)[0]
            return status_line.startswith(b"HTTP/") and status_line.split()[1:2] == [b"200"]
    except OSError:
        return False


def _log_tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    return ""


def _require(binary: str) -> None:
    if shutil.which(binary) is None:
        hint = INSTALL_HINT.get(binary, "")
        raise RemoteEngineError(f"{binary} is not installed" + (f" ({hint})" if hint else ""))


# --- bridges and mounts --------------------------------------------------------------------


def _used_ipv4_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host already has an address or route in."""
    used: list[ipaddress.IPv4Network] = []
    addrs = _run(["ip", "-4", "-o", "addr", "show"]).stdout.split()
    routes = _run(["ip", "-4", "route", "show", "table", "all"]).stdout.split()
    for word in [*addrs, *routes]:
        with contextlib.suppress(ValueError):
            if word[0].isdigit() and word.count(".") == 3:
                used.append(ipaddress.IPv4Network(word, strict=False))
    return used


def _pick_subnet(taken: set[str]) -> ipaddress.IPv4Network:
    used = _used_ipv4_networks()
    candidates = list(SUBNET_POOL.subnets(new_prefix=24))[1:-1]
    start = secrets.randbelow(len(candidates))  # spread concurrent sessions apart
    for net in candidates[start:] + candidates[:start]:
        if str(net) not in taken and not any(net.overlaps(u) for u in used):
            return net
    raise RemoteEngineError(f"no unused /24 left in {SUBNET_POOL}")


def _bridge_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def _create_bridge(name: str, subnet: str) -> None:
    gateway = next(ipaddress.ip_network(subnet).hosts())
    prefix = ipaddress.ip_network(subnet).prefixlen
    if _bridge_exists(name):
        _delete_bridge(name)
    _run(["ip", "link", "add", name, "type", "bridge"])
    _run(["ip", "addr", "add", f"{gateway}/{prefix}", "dev", name])
    _run(["ip", "link", "set", name, "up"])


def _delete_bridge(name: str) -> None:
    if name.startswith(BRIDGE_PREFIX) and _bridge_exists(name):  # never anyone else's
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def _unmount_under(root: Path) -> None:
    """dockerd bind-mounts its data root onto itself and, after a kill, leaves overlay and netns
    mounts behind; rmtree would fail with EBUSY. Deepest first."""
    prefix = str(root)
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            point = line.split()[1].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        done = subprocess.run(["umount", point], capture_output=True, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


# --- the engine ----------------------------------------------------------------------------


def _dockerd_argv(root: Path, bridge: str, namespace: str) -> list[str]:
    return [
        DOCKERD,
        f"--host=unix://{root / 'docker.sock'}",
        f"--data-root={root / 'data'}",
        f"--exec-root={root / 'exec'}",
        f"--pidfile={root / 'docker.pid'}",
        f"--bridge={bridge}",
        "--iptables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--userland-proxy=true",
        "--dns=127.0.0.1",
        "--storage-driver=overlay2",
        f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}",
        f"--containerd-namespace={namespace}",
        f"--containerd-plugins-namespace={namespace}-plugins",
    ]


def _spawn_dockerd(root: Path, bridge: str, namespace: str) -> subprocess.Popen[bytes]:
    sock = root / "docker.sock"
    log = root / "dockerd.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(_dockerd_argv(root, bridge, namespace), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RemoteEngineError(f"second dockerd exited {proc.returncode}:\n{_log_tail(log)}")
        return _docker_ping(sock)

    try:
        wait_for(ready, READY_TIMEOUT_S, f"the second dockerd on {sock}")
    except RemoteEngineError:
        _terminate([proc.pid], STOP_TIMEOUT_S)
        proc.wait()
        raise
    return proc


def _stop_dockerd(pid: int, client: docker.DockerClient | None) -> None:
    if client is not None:
        with contextlib.suppress(docker.errors.DockerException, OSError):
            for container in client.containers.list(all=True):
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
    _terminate([pid], STOP_TIMEOUT_S)


def _read_state(root: Path) -> dict[str, Any]:
    try:
        data = json.loads((root / STATE_NAME).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _owner_alive(state: dict[str, Any]) -> bool:
    pid = state.get("owner_pid")
    return (isinstance(pid, int) and _process_alive(pid)
            and _start_time(pid) == state.get("owner_start"))


def _clean_instance(root: Path, state: dict[str, Any]) -> None:
    """Remove one instance whose owner is gone, whatever state its daemons are in."""
    bridge = str(state.get("bridge") or BRIDGE_PREFIX + root.name)
    namespace = str(state.get("namespace") or bridge)
    pids = _pids_mentioning(root)
    dockerds = [p for p in pids if Path((_cmdline(p) or [""])[0]).name == DOCKERD]
    if dockerds:
        _terminate(dockerds, STOP_TIMEOUT_S)  # a clean stop stops its containers
    elif any("containerd" in " ".join(_cmdline(p)) for p in pids) and state.get("subnet"):
        # dockerd was killed but containers live on in their shims: start it again on the
        # same dirs so it reaps them, then stop it cleanly.
        with contextlib.suppress(FileNotFoundError):
            (root / "docker.pid").unlink()
        if not _bridge_exists(bridge):
            _create_bridge(bridge, str(state["subnet"]))
        with contextlib.suppress(RemoteEngineError):
            proc = _spawn_dockerd(root, bridge, namespace)
            client = docker.DockerClient(base_url=f"unix://{root / 'docker.sock'}")
            try:
                _stop_dockerd(proc.pid, client)
            finally:
                client.close()
            proc.wait()
    _terminate(_pids_mentioning(root), STOP_TIMEOUT_S)  # sshd, stray containerd or shims
    _unmount_under(root)
    _delete_bridge(bridge)
    shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _locked(base_dir: Path) -> Iterator[None]:
    base_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(base_dir / LOCK_NAME, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _clean_leftovers_locked(base_dir: Path) -> list[str]:
    cleaned = []
    live_bridges = set()
    for root in sorted(p for p in base_dir.iterdir() if p.is_dir()):
        state = _read_state(root)
        if _owner_alive(state):
            live_bridges.add(str(state.get("bridge")))
            continue
        _clean_instance(root, state)
        cleaned.append(root.name)
    for link in Path("/sys/class/net").iterdir():
        if link.name.startswith(BRIDGE_PREFIX) and link.name not in live_bridges:
            _delete_bridge(link.name)
            cleaned.append(link.name)
    return cleaned


def clean_leftovers(base_dir: Path = BASE_DIR) -> list[str]:
    """Remove instances (and bridges) left by killed runs; live sessions' are left alone."""
    with _locked(base_dir):
        return _clean_leftovers_locked(base_dir)


class RemoteEngine:
    """A second Docker engine reachable as ``ssh://root@127.0.0.1:PORT``.

    Attributes for tests: ``docker_socket`` (the remote-side socket path, what a Host's
    ``spec.ssh.socket`` names), ``docker_url`` (direct ``unix://`` access for assertions),
    ``ssh_port``, ``key_file``, ``known_hosts_file``, ``url``, ``bridge``, ``subnet``.
    """

    def __init__(self, base_dir: Path = BASE_DIR, data_root_mib: int | None = None) -> None:
        self.base_dir = base_dir
        # A data root of this size (a tmpfs of its own): a Host whose disk is nearly full.
        self.data_root_mib = data_root_mib
        self.id = secrets.token_hex(3)
        self.root = base_dir / self.id
        self.bridge = BRIDGE_PREFIX + self.id
        self.namespace = f"rtvi-remote-{self.id}"
        self.subnet = ""
        self.docker_socket = self.root / "docker.sock"
        self.docker_url = f"unix://{self.docker_socket}"
        self.key_file = self.root / "client_ed25519"
        self.host_key_file = self.root / "ssh_host_ed25519_key"
        self.known_hosts_file = self.root / "known_hosts"
        self.sshd_config = self.root / "sshd_config"
        self.sshd_log = self.root / "sshd.log"
        self.ssh_port = 0
        self._dockerd: subprocess.Popen[bytes] | None = None
        self._sshd: subprocess.Popen[bytes] | None = None
        self._client: docker.DockerClient | None = None
        self._sshd_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"ssh://{SSH_USER}@{LOOPBACK}:{self.ssh_port}"

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> RemoteEngine:
        for binary in (DOCKERD, SSHD, SSH_KEYGEN, DOCKER_CLI, "ip"):
            _require(binary)
        try:
            with _locked(self.base_dir):
                _clean_leftovers_locked(self.base_dir)
                taken = {str(_read_state(p).get("subnet")) for p in self.base_dir.iterdir()
                         if p.is_dir()}
                self.subnet = str(_pick_subnet(taken))
                self.root.mkdir(mode=0o700)
                self.ssh_port = free_port()
                owner = os.getpid()
                (self.root / STATE_NAME).write_text(json.dumps({
                    "owner_pid": owner, "owner_start": _start_time(owner),
                    "bridge": self.bridge, "subnet": self.subnet, "namespace": self.namespace,
                    "ssh_port": self.ssh_port}))
                _create_bridge(self.bridge, self.subnet)
            if self.data_root_mib is not None:
                (self.root / "data").mkdir()
                _run(["mount", "-t", "tmpfs", "-o", f"size={self.data_root_mib}m", "tmpfs",
                      str(self.root / "data")])
            self._dockerd = _spawn_dockerd(self.root, self.bridge, self.namespace)
            self._write_ssh_files()
            self.start_sshd()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Remove its containers, stop sshd and dockerd cleanly, remove bridge and files."""
        with contextlib.suppress(RemoteEngineError):
            self.stop_sshd()
        if self._dockerd is not None:
            _stop_dockerd(self._dockerd.pid,
                          self.client if _docker_ping(self.docker_socket) else None)
            self._dockerd.wait()
            self._dockerd = None
        if self._client is not None:
            self._client.close()
            self._client = None
        _terminate(_pids_mentioning(self.root), STOP_TIMEOUT_S)  # stray containerd, if any
        _unmount_under(self.root)
        _delete_bridge(self.bridge)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RemoteEngine:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- sshd ------------------------------------------------------------------------------

    def _write_ssh_files(self) -> None:
        for path, comment in ((self.host_key_file, "rtvi-remote-host"),
                              (self.key_file, "rtvi-remote-client")):
            _run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
        client_pub = Path(f"{self.key_file}.pub").read_text()
        (self.root / "authorized_keys").write_text(client_pub)
        host_pub = " ".join(Path(f"{self.host_key_file}.pub").read_text().split()[:2])
        self.known_hosts_file.write_text(f"[{LOOPBACK}]:{self.ssh_port} {host_pub}\n")
        self.sshd_config.write_text("\n".join([
            f"Port {self.ssh_port}",
            f"ListenAddress {LOOPBACK}",
            f"HostKey {self.host_key_file}",
            f"PidFile {self.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            # The key files live under /tmp (world-writable): StrictModes would reject them.
            "StrictModes no",
            "AllowStreamLocalForwarding yes",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "LogLevel INFO",
            "",
        ]))

    @property
    def sshd_running(self) -> bool:
        return self._sshd is not None and self._sshd.poll() is None

    def start_sshd(self) -> None:
        """Start sshd on the same port with the same keys; returns once it accepts connections.
        A no-op when it is already running."""
        with self._sshd_lock:
            if self.sshd_running:
                return
            SSHD_PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
            with open(self.sshd_log, "ab") as out:
                proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.sshd_config)],
                                        stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            self._sshd = proc

            def listening() -> bool:
                if proc.poll() is not None:
                    raise RemoteEngineError(f"sshd exited {proc.returncode}:\n"
                                            f"{_log_tail(self.sshd_log)}")
                return port_open(self.ssh_port)

            wait_for(listening, READY_TIMEOUT_S, f"sshd on {LOOPBACK}:{self.ssh_port}")

    def stop_sshd(self) -> None:
        """Stop sshd *and* its per-connection processes, so open SSH connections really drop
        (a stopped listener alone leaves established sessions running); returns once the port
        refuses connections."""
        with self._sshd_lock:
            proc, self._sshd = self._sshd, None
            if proc is None:
                return
            sessions = _descendants(proc.pid)
            _terminate([proc.pid, *sessions], STOP_TIMEOUT_S)
            proc.wait()
            wait_for(lambda: not port_open(self.ssh_port), STOP_TIMEOUT_S,
                     f"port {self.ssh_port} to close")

    # --- docker ----------------------------------------------------------------------------

    @property
    def client(self) -> docker.DockerClient:
        """docker-py straight to the second engine's socket (for setup and assertions)."""
        if self._client is None:
            self._client = docker.DockerClient(base_url=self.docker_url)
        return self._client

    def load_image(self, image_ref: str) -> str:
        """Copy an image from the main engine (``docker save | docker load``); skipped when the
        same image ID is already there. Returns the image ID."""
        main_id = _run([DOCKER_CLI, "image", "inspect", "--format", "{{.Id}}",
                        image_ref]).stdout.strip()
        with contextlib.suppress(docker.errors.ImageNotFound):
            if self.client.images.get(image_ref).id == main_id:
                return main_id
        save = subprocess.Popen([DOCKER_CLI, "save", image_ref], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert save.stdout is not None
        load = subprocess.run([DOCKER_CLI, "-H", self.docker_url, "load", "-q"],
                              stdin=save.stdout, capture_output=True, text=True, check=False)
        save.stdout.close()
        save_err = save.stderr.read().decode(errors="replace") if save.stderr else ""
        if save.wait() != 0 or load.returncode != 0:
            raise RemoteEngineError(f"copying {image_ref} to the second engine failed: "
                                    f"{save_err.strip()} {load.stderr.strip()}")
        return main_id

    def remove_containers(self) -> None:
        for container in self.client.containers.list(all=True):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)

    # --- what product code needs -----------------------------------------------------------

    def tunnel(self, host_name: str, local_dir: Path, **kwargs: Any) -> SshTunnel:
        """An ``SshTunnel`` to this engine, configured as a Host spec would configure it."""
        return SshTunnel(host_name, self.url, str(self.key_file), str(self.known_hosts_file),
                         str(self.docker_socket), local_dir, **kwargs)

    def host_document(self, name: str) -> dict[str, Any]:
        """A ``Host`` resource for this engine, ready to dump as YAML into a spec folder."""
        return {
            "apiVersion": "rtvi.reconciler/v1",
            "kind": "Host",
            "metadata": {"name": name},
            "spec": {"docker": self.url,
                     "ssh": {"keyFile": str(self.key_file),
                             "knownHostsFile": str(self.known_hosts_file),
                             "socket": str(self.docker_socket)}},
        }

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "ssh_port": self.ssh_port, "key_file": str(self.key_file),
                "known_hosts_file": str(self.known_hosts_file),
                "docker_socket": str(self.docker_socket), "docker_url": self.docker_url,
                "bridge": self.bridge, "subnet": self.subnet, "root": str(self.root)}


@pytest.fixture(scope="session", name="remote_engine")
def remote_engine_fixture() -> Iterator[RemoteEngine]:
    """A second engine behind sshd for the whole session. Tests that stop sshd must start it
    again (``start_sshd()`` in a ``finally``); tests remove the containers they create."""
    engine = RemoteEngine()
    try:
        engine.start()
    except RemoteEngineError as exc:
        pytest.fail(f"cannot set up the remote engine: {exc}")
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(name="remote")
def remote_fixture(remote_engine: RemoteEngine, emulator_image: str) -> Iterator[RemoteEngine]:
    """The remote engine with sshd up and the emulator image loaded; after the test, sshd is
    started again (a test that stopped it must not break the next one) and its containers
    removed."""
    remote_engine.start_sshd()
    remote_engine.load_image(emulator_image)
    yield remote_engine
    remote_engine.start_sshd()
    remote_engine.remove_containers()


def main(argv: list[str] | None = None) -> int:
    """``serve``: start one, print its facts as JSON, run until SIGINT/SIGTERM.
    ``clean``: remove instances left by killed runs."""
    parser = argparse.ArgumentParser(prog="remote-engine")
    parser.add_argument("command", choices=["serve", "clean"])
    args = parser.parse_args(argv)
    if args.command == "clean":
        print(json.dumps({"cleaned": clean_leftovers()}))
        return 0
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with RemoteEngine() as engine:
        print(json.dumps(engine.describe()), flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
