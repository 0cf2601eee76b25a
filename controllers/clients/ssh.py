"""SSH access to a remote Host's Docker engine, its HTTP ports and its shell.

Why asyncssh with local forwards instead of docker-py's own ``ssh://``: docker-py needs paramiko
and spawns a slow handshake per client (about 7 s per script here), while one asyncssh connection
(about 0.05 s) carries any number of channels. The remote engine's socket is forwarded to a local
Unix socket, so :class:`controllers.clients.docker_client.DockerEngine` talks to a remote Host
exactly as to a local one (``unix://`` URL) and keeps its error mapping: when the SSH connection
is gone the local socket refuses connections and docker calls fail with ``HostUnreachable``.

Why a private event loop thread per tunnel: the controllers are synchronous (docker-py is), and
asyncssh needs a running loop to keep the connection, its keepalives and its forwards alive between
calls. Public methods hand coroutines to that loop (``run_coroutine_threadsafe``) and wait.

Why strict host keys: a reconciler that silently trusted a new host key would hand root-equivalent
Docker access to whoever answers on that address. Keys come only from the Host's known_hosts file;
an unknown or changed key is a ``PermanentError`` (a person must verify and add it), never retried.

Error mapping (see ``controllers.errors``):
- missing/unreadable key or known_hosts file, bad URL, unknown/changed host key, login refused
  → ``PermanentError`` (retrying cannot help until someone changes a file or the spec);
- connection refused, timeout, dropped connection, channel failures → ``HostUnreachable``
  (temporary: the Host's resources are Degraded and retried with backoff).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import getpass
import os
import shlex
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from controllers.errors import HostUnreachable, PermanentError, TemporaryError
from specs.models import split_ssh_url

DEFAULT_SSH_PORT = 22
LOCAL_FORWARD_HOST = "127.0.0.1"
# Detect a silently dead peer (cable pulled, VM frozen) within ~45 s; a stopped sshd closes the
# TCP connection and is noticed at once without keepalives.
KEEPALIVE_INTERVAL_S = 15.0
KEEPALIVE_COUNT_MAX = 3
# Extra wall time a synchronous caller waits beyond the operation's own timeout, so the loop's
# timeout (with its clear message) fires first and the caller's is only a safety net.
CALL_SLACK_S = 5.0
CLOSE_TIMEOUT_S = 5.0
# sun_path holds 108 bytes including the terminating NUL.
UNIX_PATH_MAX = 107
# The forwarded socket gives root-equivalent access to the remote engine: owner only.
LOCAL_DIR_MODE = 0o700
LOCAL_SOCKET_MODE = 0o600
EXIT_KILLED_BY_SIGNAL = -1

T = TypeVar("T")


@dataclass(frozen=True)
class SshTarget:
    """Where an ``ssh://user@host[:port]`` URL points."""

    user: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port`` as people read it (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_ssh_url(url: str, host_name: str) -> SshTarget:
    """Split ``ssh://user@host[:port]`` (the spec's own pattern, ``specs.models.split_ssh_url``,
    so what validates is what connects); a missing user means the local user, as with ssh(1).

    A malformed URL is permanent: only a spec change can fix it."""
    parts = split_ssh_url(url)
    if parts is None:
        raise PermanentError(f"Host {host_name}: invalid SSH URL {url!r}: expected "
                             "ssh://[user@]host[:port] (no password, path or query; a port in "
                             "1..65535)")
    user, host, port = parts
    return SshTarget(user=user or getpass.getuser(), host=host, port=port or DEFAULT_SSH_PORT)


class SshTunnel:
    """An SSH connection to one Host that exposes its Docker socket as a local Unix socket
    (asyncssh ``forward_local_path``), plus TCP forwards for HTTP probes and remote commands.

    ``start()`` is idempotent and is the reconnect: after the connection drops, ``connected``
    turns False, calls through the old forwards fail, and the next ``start()`` (or ``run()``,
    ``forward_tcp()``) connects again and re-creates every forward at the same local socket path
    (and, where still free, the same local TCP ports). Thread-safe.
    """

    def __init__(self, host_name: str, url: str, key_file: str, known_hosts_file: str,
                 remote_socket: str, local_dir: Path, connect_timeout_s: float = 10.0) -> None:
        self.host_name = host_name
        self.url = url
        self.target = parse_ssh_url(url, host_name)
        self.key_file = key_file
        self.known_hosts_file = known_hosts_file
        self.remote_socket = remote_socket
        self.local_dir = Path(local_dir).absolute()
        self.local_socket = self.local_dir / f"{host_name}.sock"
        self.connect_timeout_s = connect_timeout_s
        if len(str(self.local_socket).encode()) > UNIX_PATH_MAX:
            raise PermanentError(f"Host {host_name}: local socket path {self.local_socket} is "
                                 f"longer than {UNIX_PATH_MAX} bytes; use a shorter state dir")
        self._thread_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._conn_lock: asyncio.Lock | None = None  # created on the tunnel's loop
        self._socket_listener: asyncssh.SSHListener | None = None
        # Targets stay remembered across reconnects, so forwards come back on their old ports.
        self._tcp_ports: dict[tuple[str, int], int] = {}
        self._tcp_listeners: dict[tuple[str, int], asyncssh.SSHListener] = {}

    # --- public, synchronous ---------------------------------------------------------------

    def start(self) -> str:
        """Connect (if not connected) and return ``unix://<local_dir>/<host_name>.sock``."""
        self._call(self._ensure_connected(), self.connect_timeout_s + CALL_SLACK_S)
        return f"unix://{self.local_socket}"

    def forward_tcp(self, remote_host: str, remote_port: int) -> tuple[str, int]:
        """A local ``(127.0.0.1, port)`` that reaches ``remote_host:remote_port`` as seen from
        the remote host (so ``127.0.0.1`` means the Host's own loopback). Cached per target."""
        port = self._call(self._forward_tcp(remote_host, remote_port),
                          self.connect_timeout_s + CALL_SLACK_S)
        return LOCAL_FORWARD_HOST, port

    def run(self, argv: list[str], timeout_s: float = 20.0) -> tuple[int, str, str]:
        """Exit status, stdout and stderr of a remote command. ``argv`` is shell-quoted: the
        remote login shell sees exactly these words. A command killed by a signal reports -1."""
        return self._call(self._run(argv, timeout_s),
                          self.connect_timeout_s + timeout_s + CALL_SLACK_S)

    def stream(self, argv: list[str], on_line: Callable[[str], None]) -> RemoteStream:
        """Start a remote command that keeps printing (``nvidia-smi -lms``) and hand each line
        of its stdout to ``on_line`` (on the tunnel's thread) as it comes: one channel for a
        long run instead of one command per sample. It ends when the command does, when the
        connection drops, or on :meth:`RemoteStream.close` (the channel closes and the command
        dies of SIGPIPE at its next line)."""
        loop = self._ensure_loop()
        return RemoteStream(asyncio.run_coroutine_threadsafe(self._stream(argv, on_line), loop))

    @property
    def connected(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.is_closed()

    def close(self) -> None:
        """Close the connection and its forwards, stop the loop thread, remove the local socket.
        Idempotent; a later ``start()`` begins afresh."""
        with self._thread_lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            future = asyncio.run_coroutine_threadsafe(self._disconnect(), loop)
            with contextlib.suppress(Exception):
                future.result(CLOSE_TIMEOUT_S + CALL_SLACK_S)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CLOSE_TIMEOUT_S)
            if not thread.is_alive():
                loop.close()
        self._conn = None
        self._conn_lock = None
        self._tcp_listeners.clear()
        with contextlib.suppress(FileNotFoundError):
            if self.local_socket.is_socket():
                self.local_socket.unlink()

    def __enter__(self) -> SshTunnel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- loop plumbing ---------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._thread_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, daemon=True,
                                          name=f"ssh-{self.host_name}")
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise HostUnreachable(f"Host {self.host_name}: SSH to {self.target.address} did not "
                                  f"answer within {timeout_s:.0f} s") from exc

    # --- coroutines, run on the tunnel's loop ----------------------------------------------

    async def _ensure_connected(self) -> asyncssh.SSHClientConnection:
        if self._conn_lock is None:
            self._conn_lock = asyncio.Lock()
        async with self._conn_lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            await self._drop_connection()
            conn = await self._connect()
            try:
                await self._create_forwards(conn)
            except BaseException:
                conn.abort()
                raise
            self._conn = conn
            return conn

    def _load_credentials(self) -> tuple[asyncssh.SSHKey, asyncssh.SSHKnownHosts]:
        """Read both files on every connect: an operator who adds a verified host key fixes a
        Stalled Host without restarting the daemon. Problems with them are permanent."""
        for what, path in (("SSH key file", self.key_file),
                           ("known_hosts file", self.known_hosts_file)):
            if not Path(path).is_file():
                raise PermanentError(f"Host {self.host_name}: {what} {path} does not exist")
        try:
            key = asyncssh.read_private_key(self.key_file)
        except (OSError, asyncssh.KeyImportError) as exc:
            raise PermanentError(f"Host {self.host_name}: cannot use SSH key file "
                                 f"{self.key_file}: {exc}") from exc
        try:
            known_hosts = asyncssh.read_known_hosts(self.known_hosts_file)
        except (OSError, ValueError) as exc:
            raise PermanentError(f"Host {self.host_name}: cannot read known_hosts file "
                                 f"{self.known_hosts_file}: {exc}") from exc
        return key, known_hosts

    async def _connect(self) -> asyncssh.SSHClientConnection:
        key, known_hosts = self._load_credentials()
        address = self.target.address
        try:
            return await asyncssh.connect(
                self.target.host, self.target.port, username=self.target.user,
                client_keys=[key], known_hosts=known_hosts,
                # Only what the spec names: no agent, no ~/.ssh/config, no other auth methods.
                agent_path=None, config=None, preferred_auth="publickey",
                connect_timeout=self.connect_timeout_s,
                keepalive_interval=KEEPALIVE_INTERVAL_S, keepalive_count_max=KEEPALIVE_COUNT_MAX,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise PermanentError(
                f"Host {self.host_name}: the SSH host key of {address} is not in known_hosts "
                f"file {self.known_hosts_file} (or has changed); refusing to connect — add the "
                f"key after verifying it ({exc.reason})") from exc
        except asyncssh.PermissionDenied as exc:
            raise PermanentError(
                f"Host {self.host_name}: SSH login as {self.target.user}@{address} with key "
                f"{self.key_file} was refused ({exc.reason}); is its public key authorized "
                "there?") from exc
        except (TimeoutError, asyncssh.Error, OSError) as exc:
            reason = (f"no answer within {self.connect_timeout_s:g} s"
                      if isinstance(exc, TimeoutError) else _reason(exc))
            raise HostUnreachable(f"Host {self.host_name}: cannot connect over SSH to "
                                  f"{address}: {reason}") from exc

    async def _create_forwards(self, conn: asyncssh.SSHClientConnection) -> None:
        self.local_dir.mkdir(parents=True, exist_ok=True, mode=LOCAL_DIR_MODE)
        # asyncio replaces a stale socket file left by the previous connection; anything else
        # at that path is a configuration problem, not a network one.
        try:
            self._socket_listener = await conn.forward_local_path(str(self.local_socket),
                                                                  self.remote_socket)
            os.chmod(self.local_socket, LOCAL_SOCKET_MODE)
        except OSError as exc:
            raise PermanentError(f"Host {self.host_name}: cannot listen on local socket "
                                 f"{self.local_socket}: {exc}") from exc
        for target, port in list(self._tcp_ports.items()):
            self._tcp_ports[target] = await self._listen_tcp(conn, target, port)

    async def _listen_tcp(self, conn: asyncssh.SSHClientConnection, target: tuple[str, int],
                          port: int) -> int:
        """Listen for ``target`` on ``port`` if that is still free, else on any free port."""
        listener: asyncssh.SSHListener | None = None
        if port:
            with contextlib.suppress(OSError):
                listener = await conn.forward_local_port(LOCAL_FORWARD_HOST, port, *target)
        if listener is None:
            try:
                listener = await conn.forward_local_port(LOCAL_FORWARD_HOST, 0, *target)
            except OSError as exc:
                raise TemporaryError(f"Host {self.host_name}: cannot open a local port for "
                                     f"{target[0]}:{target[1]}: {exc}") from exc
        self._tcp_listeners[target] = listener
        return listener.get_port()

    async def _forward_tcp(self, remote_host: str, remote_port: int) -> int:
        conn = await self._ensure_connected()
        target = (remote_host, remote_port)
        assert self._conn_lock is not None
        async with self._conn_lock:
            if target in self._tcp_listeners:
                return self._tcp_ports[target]
            port = await self._listen_tcp(conn, target, 0)
            self._tcp_ports[target] = port
            return port

    async def _run(self, argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        conn = await self._ensure_connected()
        command = shlex.join(argv)
        try:
            done = await conn.run(command, check=False, timeout=timeout_s, errors="replace")
        except asyncssh.TimeoutError as exc:
            raise TemporaryError(f"Host {self.host_name}: remote command {command!r} did not "
                                 f"finish within {timeout_s:g} s") from exc
        except (asyncssh.Error, OSError) as exc:
            raise HostUnreachable(f"Host {self.host_name}: remote command {command!r} on "
                                  f"{self.target.address} failed: {_reason(exc)}") from exc
        status = done.returncode if done.returncode is not None else EXIT_KILLED_BY_SIGNAL
        return status, _text(done.stdout), _text(done.stderr)

    async def _stream(self, argv: list[str], on_line: Callable[[str], None]) -> str:
        conn = await self._ensure_connected()
        command = shlex.join(argv)
        try:
            async with conn.create_process(command, errors="replace") as proc:
                async for line in proc.stdout:
                    on_line(line)
                said = (await proc.stderr.read()).strip().splitlines()
                done = await proc.wait(check=False)
        except (asyncssh.Error, OSError) as exc:
            raise HostUnreachable(f"Host {self.host_name}: remote command {command!r} on "
                                  f"{self.target.address} failed: {_reason(exc)}") from exc
        status = done.returncode if done.returncode is not None else EXIT_KILLED_BY_SIGNAL
        return f"exited {status}" + (f": {said[-1]}" if said else "")

    async def _drop_connection(self) -> None:
        for listener in [self._socket_listener, *self._tcp_listeners.values()]:
            if listener is not None:
                listener.close()
        self._socket_listener = None
        self._tcp_listeners.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), CLOSE_TIMEOUT_S)

    async def _disconnect(self) -> None:
        await self._drop_connection()


class RemoteStream:
    """A started :meth:`SshTunnel.stream`: whether it still runs, why it ended, its end."""

    def __init__(self, future: concurrent.futures.Future[str]) -> None:
        self._future = future

    @property
    def ended(self) -> bool:
        return self._future.done()

    def why_ended(self) -> str:
        """How it ended (its exit status and last stderr line, or the connection's error);
        empty while it runs."""
        if not self._future.done():
            return ""
        if self._future.cancelled():
            return "closed"
        exc = self._future.exception()
        return str(exc) if exc is not None else self._future.result()

    def close(self) -> None:
        self._future.cancel()  # cancels the task on the tunnel's loop: the channel closes


def _reason(exc: BaseException) -> str:
    """A short human reason from asyncssh's and the OS's exception types."""
    if isinstance(exc, asyncssh.DisconnectError | asyncssh.ChannelOpenError):
        return exc.reason or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)  # asyncio's own text repeats the address we already name
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data


__all__ = ["SshTarget", "SshTunnel", "parse_ssh_url"]
