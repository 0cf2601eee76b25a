"""Where the VSS harness runs: a process beside the run, or a container on the run's Host.

Why two places: a run in the reconciler's process (``executor: reconciler``) starts the
harness as a process of its own session here, as the perf field guide does by hand, and only
on a Host whose engine is this machine's. A run that executes as a job on its Host
(``executor: host``, issue 27) is itself a container there, with the Host's Docker socket and
no process space or files of the Host: it starts the harness as a sibling container that sees
the Host's own userland, so the harness runs with the Host's interpreter and virtual
environment, from the Host's checkout, exactly as it would by hand on that machine:

- the runner image's merged-/usr skeleton (``/bin``, ``/lib``, ``/lib64`` are links into
  ``usr/``) with the Host's ``/usr`` bound over its own, read-only;
- every Host folder the harness reads bound read-only at the same path (``host_mounts``: the
  working directory, the config's folder, the interpreter's virtual environment, absolute
  argv items, the files the scenario names); nothing else of the Host;
- the job's volume at the same path as in the runner, so the run handles (CONFIG, REPORT,
  LOG) are the same paths for both;
- the Host's network (the run's service is on the Host's loopback), the run's labels and a
  name in the run's inventory before it is created, so a cleanup after any crash removes it;
  its stop signal is SIGINT: the harness cleans up what it started on its first SIGINT. No
  ``--init``: Docker's init is mounted at ``/sbin/docker-init``, a path the Host's ``/usr``
  covers here; the harness is the container's first process (``exec``), and Python's own
  SIGINT handler makes it interruptible there.

Both places give the same two operations (``Launcher``): run once and read the output (the
``--list-scenarios`` check), and start supervised with the output appended to a log file.
"""

from __future__ import annotations

import contextlib
import posixpath
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from controllers.clients.docker_client import ContainerRequest, DockerEngine
from controllers.errors import ControllerError
from controllers.kinds.experiments import processes
from controllers.waiting import until
from specs.trust import inside

USR = "/usr"
SHELL = "/bin/sh"
# ``sh -c SCRIPT LOG ARGV...``: the harness's output appended to LOG, the harness in sh's place
APPEND_TO_LOG = 'exec "$@" >>"$0" 2>&1'
ONCE_PACE_S = 0.5
ONCE_TIMEOUT_S = 30.0
READLINK = "/usr/bin/readlink"
KERNEL_FILESYSTEMS = ("/proc", "/sys", "/dev")
MAX_LINK_HOPS = 4  # venv -> pyenv version -> ...: each hop a folder more to bind


@dataclass(frozen=True)
class OnHost:
    """Where a job's harness container comes from: the runner image, and the job's volume
    with its mount point (the same in the runner and the harness)."""

    image: str
    volume: str
    mount: str


class HarnessError(ControllerError):
    """The harness cannot be started as the spec says."""


class HarnessRun(Protocol):
    """A started harness."""

    name: str  # as the run's inventory records it

    def poll(self) -> int | None:
        """Its exit code once it has ended, else None."""
        ...

    def end(self, interrupt_s: float) -> None:
        """End it: one SIGINT and ``interrupt_s`` to clean up, then harder (0: at once)."""
        ...


class Launcher(Protocol):
    """Where the harness runs (see the module docstring)."""

    def once(self, argv: list[str], cwd: str, env: dict[str, str], reads: Sequence[str],
             timeout_s: float) -> tuple[int, str]:
        """Run to its end: the exit code and everything it wrote (HarnessError: cannot)."""
        ...

    def start(self, argv: list[str], cwd: str, env: dict[str, str], reads: Sequence[str],
              log: Path) -> HarnessRun:
        """Start it with its output appended to ``log`` (recorded before anything can go
        wrong, so a recovery ends it); HarnessError when it cannot be started."""
        ...


# --- beside the run ------------------------------------------------------------------------

@dataclass
class LocalRun:
    proc: subprocess.Popen[bytes]
    name: str

    def poll(self) -> int | None:
        return self.proc.poll()

    def end(self, interrupt_s: float) -> None:
        if self.proc.poll() is None and processes.end(self.name, interrupt_s) is None:
            self.proc.wait(timeout=5)  # ended (stopped, over budget): reap it


@dataclass
class LocalLauncher:
    """A process of its own session on this machine (``reads`` need no mounting here)."""

    note: Callable[[str], None]  # write-ahead: the process's name (``processes.name_of``)

    def once(self, argv: list[str], cwd: str, env: dict[str, str], reads: Sequence[str],
             timeout_s: float) -> tuple[int, str]:
        try:
            done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                                  timeout=timeout_s, env=env, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise HarnessError(f"cannot run {' '.join(argv)}: {exc}") from None
        return done.returncode, f"{done.stderr}\n{done.stdout}"

    def start(self, argv: list[str], cwd: str, env: dict[str, str], reads: Sequence[str],
              log: Path) -> HarnessRun:
        with open(log, "ab") as out:
            try:
                proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env,
                                        start_new_session=True)
            except OSError as exc:
                raise HarnessError(f"cannot start the harness {argv[0]}: {exc}") from None
        run = LocalRun(proc, processes.name_of(proc))
        self.note(run.name)
        return run


# --- on the Host, beside a job ---------------------------------------------------------------

def read_only_binds(paths: Sequence[str], avoid: str) -> list[tuple[str, str, bool]]:
    """Read-only binds, each at its own path, of the absolute ``paths`` (normalised; one
    inside another is covered by it; ``/``, ``avoid`` (the job volume's mount point), the
    kernel's filesystems and what is under them, never: Docker refuses a mount point twice,
    the volume is the job's, and ``/proc``, ``/sys``, ``/dev`` are the container's own)."""
    kept: list[str] = []
    for path in sorted({posixpath.normpath(p) for p in paths if p.startswith("/")}):
        if path != "/" and not _covered(path, [*kept, avoid, *KERNEL_FILESYSTEMS]):
            kept.append(path)
    return [(path, path, True) for path in kept]


def host_mounts(reads: Sequence[str], avoid: str) -> list[tuple[str, str, bool]]:
    """The harness container's binds: the Host's ``/usr`` and every path in ``reads``."""
    return read_only_binds([USR, *reads], avoid)


def interpreter_root(argv: Sequence[str]) -> list[str]:
    """The folder the harness's interpreter needs beside ``/usr``: a virtual environment's
    root for ``<venv>/bin/python``, else the program's folder (none for a bare name)."""
    if not argv or not argv[0].startswith("/"):
        return []
    program = posixpath.normpath(argv[0])
    folder = posixpath.dirname(program)
    return [posixpath.dirname(folder) if posixpath.basename(folder) == "bin" else folder]


@dataclass
class ContainerRun:
    engine: DockerEngine
    container_id: str
    name: str

    def poll(self) -> int | None:
        info = self.engine.container(self.container_id)
        if info is None:
            return -1  # removed under us: ended, and it said nothing more
        return info.exit_code if info.status in ("exited", "dead") else None

    def end(self, interrupt_s: float) -> None:
        # Its stop signal is SIGINT; Docker kills it after ``interrupt_s``. The exited
        # container stays for the cleanup, which removes what the inventory lists.
        self.engine.stop(self.container_id, max(0, int(interrupt_s)))


@dataclass
class ContainerLauncher:
    """A sibling container on the job's Host (see the module docstring)."""

    engine: DockerEngine
    image: str  # the runner image: its merged-/usr skeleton
    labels: dict[str, str]
    name_for: Callable[[str], str]  # "list" / "run" -> the container's name
    volume: tuple[str, str]  # the job's volume and its mount point (the same in the runner)
    note: Callable[[str], None]  # write-ahead: the container's name
    stop: threading.Event

    _interpreter: list[str] | None = None  # the folders the interpreter's links lead to

    def _create(self, part: str, entrypoint: list[str], cwd: str, env: dict[str, str],
                reads: Sequence[str]) -> tuple[str, str]:
        name = self.name_for(part)
        self.note(name)
        with contextlib.suppress(ControllerError):
            old = self.engine.container(name)
            if old is not None:  # a leftover of an attempt that died: never run it again
                self.engine.remove(old.id)
        try:
            container_id = self.engine.create(ContainerRequest(
                name=name, image=self.image, labels=dict(self.labels), environment=env,
                mounts=host_mounts(reads, self.volume[1]), volumes=[self.volume],
                entrypoint=entrypoint, command=[], workdir=cwd, network_mode="host",
                stop_signal="SIGINT", init=False))
            self.engine.start(container_id)
        except ControllerError as exc:
            raise HarnessError(f"cannot start the harness on the Host: {exc}") from None
        return name, container_id

    def _to_end(self, part: str, entrypoint: list[str], cwd: str, env: dict[str, str],
                reads: Sequence[str], timeout_s: float) -> tuple[int, str]:
        name, container_id = self._create(part, entrypoint, cwd, env, reads)
        run = ContainerRun(self.engine, container_id, name)
        try:
            code = until(run.poll, timeout_s=timeout_s, pace=ONCE_PACE_S, stop=self.stop)
            said = self.engine.logs(container_id)
        finally:
            with contextlib.suppress(ControllerError):
                self.engine.remove(container_id)
        if code is None:
            raise HarnessError(f"{' '.join(entrypoint)} did not end within {timeout_s:g}s")
        return code, said

    def _reads(self, argv: list[str], reads: Sequence[str]) -> list[str]:
        """``reads`` and the install of the interpreter ``argv[0]`` leads to. A virtual
        environment's ``python`` is a link to its base interpreter: ``/usr/bin/python3`` on
        Debian (bound already), but ``~/.pyenv/versions/X`` or a conda prefix elsewhere. The
        links are the Host's, so they are followed there (``readlink -m`` in the container),
        one folder at a time, until the interpreter is inside what is bound."""
        if self._interpreter is None:
            found: list[str] = []
            for _ in range(MAX_LINK_HOPS):
                if not argv or not argv[0].startswith("/"):
                    break
                code, said = self._to_end("probe", [READLINK, "-m", argv[0]], "/", {},
                                          [*reads, *found], ONCE_TIMEOUT_S)
                target = (said.strip().splitlines() or [""])[-1].strip()
                more = interpreter_root([target]) if code == 0 else []
                if not more or not [m for m in more if not _covered(m, [USR, *reads, *found])]:
                    break
                found += more
            self._interpreter = found
        return [*reads, *self._interpreter]

    def once(self, argv: list[str], cwd: str, env: dict[str, str], reads: Sequence[str],
             timeout_s: float) -> tuple[int, str]:
        return self._to_end("list", argv, cwd, env, self._reads(argv, reads), timeout_s)

    def start(self, argv: list[str], cwd: str, env: dict[str, str], reads: Sequence[str],
              log: Path) -> HarnessRun:
        name, container_id = self._create("run", [SHELL, "-c", APPEND_TO_LOG, str(log),
                                                  *argv], cwd, env, self._reads(argv, reads))
        return ContainerRun(self.engine, container_id, name)


def _covered(path: str, folders: Sequence[str]) -> bool:
    return any(inside(path, folder) for folder in folders)
