"""What every kind shares within one process: the store, live Host sessions, caption hub.

Kept apart from the kinds so that they can all use it without importing each other: a
Deployment needs the session its Host kind opened, a StreamSet the Deployment's Host.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Literal

import structlog

from controllers.experiments.board import RunBoard
from controllers.host.session import HostSession
from controllers.statusfacts import DeploymentStatusFacts
from controllers.streamset.captions import CaptionHub
from specs.models import Host
from specs.validate import SpecSet
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store

RUNTIME_DIR_NAME = "run"
Progress = Callable[[str, str], None]
log = structlog.get_logger("reconciler.kinds")


class Services:
    def __init__(self, store: Store, instance: str, progress: Progress,
                 stop: threading.Event | None = None) -> None:
        self.store = store
        self.instance = instance
        self.progress = progress
        self.sessions: dict[str, HostSession] = {}
        self._sessions_lock = threading.Lock()
        # Hosts whose last observation failed, and why; ``refused``: permanently (e.g. an
        # unknown host key), as opposed to not answering right now.
        self.host_errors: dict[str, str] = {}
        self.hosts_refused: set[str] = set()
        self.hub = CaptionHub()  # live caption sessions outlive a pass (the daemon keeps them)
        # Experiment runs, beside the queue on their own workers; ``stop`` (the process is
        # shutting down) stops them too.
        self.experiments = RunBoard(stop)
        # A FrameWatch runs (the daemon): see controllers.streamset.framewatch.
        self.frames_watched = False
        self.http_calls: Counter[str] = Counter()  # RTVI/VST requests by call (metrics)
        self._calls_lock = threading.Lock()

    def count_call(self, what: str) -> None:
        """Count one RTVI or VST request (``what``: e.g. "list streams")."""
        with self._calls_lock:
            self.http_calls[what] += 1

    def close(self) -> None:
        self.experiments.close()
        self.hub.close()
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()

    def session(self, host: Host) -> HostSession:
        """The live session of a Host, replaced when its spec changed."""
        with self._sessions_lock:
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
            url = DeploymentStatusFacts.of(record).docker_url
            spec = {"docker": url} if url else {}
        return Host.model_validate({"apiVersion": "rtvi.reconciler/v1", "kind": "Host",
                                    "metadata": {"name": host_name}, "spec": spec or {}})

    def record_failure(self, resource: Key, reason: str, message: str, stalled: bool,
                       desired_generation: str | None = None,
                       ready: Literal["False", "Unknown"] | None = None) -> None:
        """Record a failed pass: Stalled (a person must act) or Degraded (retried). ``ready``
        overrides Ready's status (a StreamSet with dead sources is known not to be Ready).
        The same failure again is one short line in the event log, not a repeat."""
        before = self.store.load(resource)
        previous = before.condition("Ready") if before is not None else None

        def mutate(st: ResourceStatus) -> None:
            st.set_condition("Ready", ready or ("False" if stalled else "Unknown"), reason,
                             message)
            st.set_condition("Progressing", "False", reason, "")
            st.set_condition("Stalled" if stalled else "Degraded", "True", reason, message)
            if desired_generation is not None:
                st.desired_generation = desired_generation
        self.store.update(resource, mutate)
        if previous is None or (previous.reason, previous.message) != (reason, message):
            self.store.events.append(resource, "Warning", reason, message)
        else:
            self.store.events.append(resource, "Warning", "RetryFailed", reason)
        log.warning("resource.failed", resource=resource, reason=reason, message=message)
