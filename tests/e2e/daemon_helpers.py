"""Run the real ``reconciler run`` daemon as a subprocess and wait on observable facts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import docker

from controllers.waiting import until
from state.errors import StateError
from state.keys import Key
from state.models import Event
from state.store import Store
from tests.conftest import RECONCILER, Cli, containers_of

LABEL_INSTANCE = "rtvi.reconciler/instance"
LABEL_RESOURCE = "rtvi.reconciler/resource"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float,
             interval: float = 0.05) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    found = until(lambda: probe() or None, timeout_s=timeout, pace=interval)
    if found is None:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                             f"{DaemonProcess.explain()}")
    return found


class DaemonProcess:
    """``reconciler run`` as a child process. Every one started is remembered, so that a test
    failing before it stops its daemon does not leave it running its runs into later tests
    (``reap``, an autouse fixture's teardown)."""

    started: ClassVar[list[DaemonProcess]] = []

    def __init__(self, cli: Cli, args: list[str], log_path: Path,
                 prefix: list[str] | None = None) -> None:
        self.cli = cli
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen([*(prefix or []), RECONCILER, "run", "--metrics-address",
                                      "off", *args],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=cli.env())
        DaemonProcess.started.append(self)

    @classmethod
    def reap(cls) -> list[str]:
        """Kill every daemon a test left running; the log of each (shown when a test fails)."""
        left = [d for d in cls.started if d.proc.poll() is None]
        cls.started.clear()
        for daemon in left:
            daemon.kill9()
        return [d.log() for d in left]

    @classmethod
    def explain(cls) -> str:
        """What every running daemon's store says is not well, in a few lines: part of a
        timed-out wait's message, which pytest's summary at the end of a CI log shows whole
        (the full picture is printed with the test's output, which a long log may cut). Each
        daemon also dumps its threads' stacks into its log (SIGUSR1), for a pass that hangs."""
        said = []
        for daemon in cls.started:
            if daemon.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.kill(daemon.proc.pid, signal.SIGUSR1)
                said.append(brief(daemon.cli))
        return "".join(f"\n{text}" for text in said if text)

    def wait_healthy(self, timeout: float = 20) -> None:
        def healthy() -> bool:
            assert self.proc.poll() is None, f"daemon exited early:\n{self.log()}"
            return self.cli("health", timeout=10).returncode == 0
        wait_for("the daemon to answer on its control socket", healthy, timeout, 0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._log.close()
        # Shown when a test fails: the daemon prints little, its store says what it saw.
        print(f"--- daemon log {self.log_path} ---\n{self.log()}\n{picture(self.cli)}")
        return code

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()


def owned(client: docker.DockerClient, instance: str) -> list[Any]:
    return containers_of(client, instance)


def run_containers(client: docker.DockerClient, instance: str, resource: str) -> list[Any]:
    """The containers (any state) that one resource of one test instance owns: tests on other
    workers run resources of the same name."""
    return [c for c in containers_of(client, instance)
            if c.labels.get(LABEL_RESOURCE) == resource]


def running_ids(client: docker.DockerClient, instance: str) -> list[str]:
    return [c.id for c in owned(client, instance) if c.status == "running"]


def status_of(cli: Cli, resource: str) -> dict[str, Any] | None:
    """Read the daemon's store directly (atomic files): cheap enough to poll."""
    record = Store(cli.state_dir).load(Key.parse(resource))
    return None if record is None else record.model_dump(mode="json")


def picture(cli: Cli, last_events: int = 40) -> str:
    """Every record's conditions and facts and the newest events, read from the store: what a
    failing daemon test shows, so that a timeout in CI says what the daemon was waiting on."""
    store = Store(cli.state_dir)
    lines = ["--- records ---"]
    records, broken = store.scan()
    lines += [f"(unreadable: {b})" for b in broken]
    for record in records:
        lines.append(f"{record.resource}:")
        lines += [f"  {c.type}={c.status} {c.reason}: {c.message}" for c in record.conditions]
        lines.append(f"  facts={record.facts}")
    lines.append(f"--- last {last_events} events ---")
    lines += [f"{e.time} {e.resource} {e.type} {e.reason}: {e.message}"
              for e in store.events.read()[-last_events:]]
    return "\n".join(lines)


def brief(cli: Cli, warnings: int = 5, width: int = 300) -> str:
    """Each record's conditions that are not well (Ready not True; Progressing, Degraded or
    Stalled True) and the newest ``warnings`` Warning events, a line each of at most ``width``
    characters."""
    store = Store(cli.state_dir)
    try:
        records, broken = store.scan()
        events = [e for e in store.events.read() if e.type == "Warning"][-warnings:]
    except (OSError, StateError) as exc:
        return f"(store unreadable: {exc})"
    lines = [f"(unreadable: {b})" for b in broken]
    for record in records:
        lines += [f"{record.resource} {c.type}={c.status} {c.reason}: {c.message}"[:width]
                  for c in record.conditions
                  if (c.status != "True") == (c.type == "Ready")]  # the others: True is bad
    lines += [f"{e.time} {e.resource} Warning {e.reason}: {e.message}"[:width] for e in events]
    return "\n".join(lines)


def events_of(cli: Cli, resource: str | None = None) -> list[Event]:
    return Store(cli.state_dir).events.read(resource=resource)


def field_of(cli: Cli, resource: str, name: str) -> Any:
    """One field of a resource's record (None while it has no record)."""
    status = status_of(cli, resource)
    return None if status is None else status.get(name)


def condition(status: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    if status is None:
        return None
    return next((c for c in status["conditions"] if c["type"] == ctype), None)


def is_ready(cli: Cli, resource: str) -> bool:
    cond = condition(status_of(cli, resource), "Ready")
    return cond is not None and cond["status"] == "True"
