"""The Host kind's part of the services: a live session per Host, what the last observation
of each said, and (in the daemon) the Docker event watchers.

Every kind that runs on a Host asks this part for the Host's session (``Hosts.of(services)
.session(host)``): one engine connection, one shared container view and one SSH tunnel per
Host, whatever the number of resources on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Self

from controllers.facts import EngineFacts
from controllers.kinds.host.session import HostSession
from controllers.services import Part, Services
from specs.models import Host
from specs.validate import SpecSet
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store

if TYPE_CHECKING:
    from controllers.kinds.host.watch import HostWatchers

RUNTIME_DIR_NAME = "run"


class Hosts(Part):
    def __init__(self, store: Store) -> None:
        self.store = store
        self.sessions: dict[str, HostSession] = {}
        self._lock = threading.Lock()
        # Hosts whose last observation failed, and why; ``refused``: permanently (e.g. an
        # unknown host key), as opposed to not answering right now.
        self.errors: dict[str, str] = {}
        self.refused: set[str] = set()
        self.watchers: HostWatchers | None = None  # the daemon's (HostKind.background)

    @classmethod
    def made(cls, services: Services) -> Self:
        return cls(services.store)

    def session(self, host: Host) -> HostSession:
        """The live session of a Host, replaced when its spec changed."""
        with self._lock:
            current = self.sessions.get(host.metadata.name)
            if current is not None and current.host == host:
                return current
            if current is not None:
                current.close()
            session = HostSession(host, self.store.root / RUNTIME_DIR_NAME)
            self.sessions[host.metadata.name] = session
            return session

    def host_for(self, spec_set: SpecSet | None, host_name: str,
                 record: ResourceStatus | None) -> Host:
        """The Host named ``host_name``: from the specs, a live session, its record, or (for
        pruning after the Host spec went) the engine URL a resource's record remembers."""
        if spec_set is not None:
            for host in spec_set.hosts:
                if host.metadata.name == host_name:
                    return host
        session = self.sessions.get(host_name)
        if session is not None:
            return session.host
        host_record = self.store.load(Key("Host", host_name))
        spec = host_record.applied_spec if host_record is not None else None
        if spec is None and record is not None:
            url = EngineFacts.of(record).docker_url
            spec = {"docker": url} if url else {}
        return Host.model_validate({"apiVersion": "rtvi.reconciler/v1", "kind": "Host",
                                    "metadata": {"name": host_name}, "spec": spec or {}})

    # --- the daemon's watches (no-ops in one-shot commands, where nothing watches) -----------

    def watch(self, host: Host) -> None:
        """Follow this Host's Docker events (its resources are repaired from them)."""
        if self.watchers is not None:
            self.watchers.watch(host)

    def unwatch(self, name: str) -> None:
        if self.watchers is not None:
            self.watchers.unwatch(name)

    def pass_started(self, key: Key) -> None:
        """A pass over ``key`` starts to look at its Host: a container name freed from now
        on is not missed (see ``conflict``)."""
        if self.watchers is not None:
            self.watchers.pass_started(key)

    def conflict(self, key: Key, host: str, held: bool) -> None:
        """``key`` cannot act because a foreign container holds its name on ``host``: wake it
        when a container there goes (``held`` False: it no longer waits)."""
        if self.watchers is not None:
            self.watchers.conflict(key, host, held)

    # --- the services' part -------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        sessions = list(self.sessions.items())
        return {"hosts": {n: ("unreachable" if n in self.errors else "ok") for n, _ in sessions},
                "dockerCallsByHost": {n: dict(sorted(s.calls_by_kind().items()))
                                      for n, s in sessions}}

    def calls(self) -> Iterable[tuple[str, float]]:
        for name, session in list(self.sessions.items()):
            yield f"docker:{name}", session.api_calls

    def stopping(self) -> None:
        if self.watchers is not None:
            self.watchers.close()

    def close(self) -> None:
        self.stopping()
        with self._lock:
            for session in self.sessions.values():
                session.close()
            self.sessions.clear()
