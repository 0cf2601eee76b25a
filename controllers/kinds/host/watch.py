"""Docker event watchers, one pair per reachable Host, and the Conflict wake-ups they drive.

Events only decide *when* a key is looked at (level-triggered). Two streams per Host:
- our containers' events (label-filtered): a killed container is repaired within seconds;
- any container removed or renamed: a name a resource wanted may be free now, so a resource
  held in Conflict by a foreign container is tried again at once rather than at the resync.
A stream that breaks is resumed from the last event's time, and the Host and everything on it
are looked at again (what happened while we were away?).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Protocol

import structlog

from controllers import ownership
from controllers.clients.docker_client import ContainerEvent, EventStream
from controllers.contract import Runtime
from controllers.errors import ControllerError
from controllers.kinds.host.session import HostSession
from specs.models import Host
from state.keys import InvalidKey, Key
from state.models import Owner


class Sessions(Protocol):
    """What the watchers need of the Host kind's part (``fleet.Hosts``)."""

    @property
    def sessions(self) -> dict[str, HostSession]: ...

    def session(self, host: Host) -> HostSession: ...

EVENT_WAKE_ACTIONS = ("die", "stop", "kill", "destroy", "oom", "pause", "health_status")
# Events that free a container name (a foreign container in our way was removed or renamed).
NAME_FREED_ACTIONS = ("destroy", "rename")
# Events that change what a container list shows: the shared view is dropped on these.
STATE_ACTIONS = frozenset({"create", "start", "restart", "die", "stop", "kill", "destroy", "oom",
                           "pause", "unpause", "rename", "update", "health_status"})
EVENT_RECONNECT_S = 1.0
log = structlog.get_logger("controllers.kinds.host.watch")


class HostWatchers:
    """The Host kind's background work in the daemon (``HostKind.background``)."""

    def __init__(self, hosts: Sessions, instance: Owner, runtime: Runtime) -> None:
        self.hosts = hosts
        self.instance = instance
        self.runtime = runtime
        self.stop = runtime.stop
        self.wake = runtime.wake  # look at this key now
        self._watchers: dict[str, threading.Event] = {}
        self._streams: dict[str, EventStream] = {}
        self._lock = threading.Lock()
        # key → Host of resources whose container name a foreign container holds.
        self._conflicts: dict[Key, str] = {}
        self._names_freed: dict[str, int] = {}  # per Host: closes the plan/record race
        self._seen_at_start: dict[Key, int] = {}

    def watch(self, host: Host) -> None:
        name = host.metadata.name
        with self._lock:
            if name in self._watchers and not self._watchers[name].is_set():
                return
            stop = threading.Event()
            self._watchers[name] = stop
        spawn = self.runtime.spawn
        spawn(f"events-{name}", lambda: self._watch_events(host, stop), forever=False)
        spawn(f"names-{name}", lambda: self._watch_names(host, stop), forever=False)

    def unwatch(self, name: str) -> None:
        with self._lock:
            stop = self._watchers.pop(name, None)
            streams = [self._streams.pop(k, None) for k in (name, f"names:{name}")]
        if stop is not None:
            stop.set()
        for stream in streams:
            if stream is not None:
                stream.close()  # unblocks the watcher's read

    def close(self) -> None:
        for name in list(self._watchers):
            self.unwatch(name)

    def pass_started(self, key: Key) -> None:
        """Called before each pass: a name freed after this is not missed (see conflict)."""
        self._seen_at_start[key] = sum(self._names_freed.values())

    def conflict(self, key: Key, host: str, held: bool) -> None:
        if not held:
            self._conflicts.pop(key, None)
            return
        self._conflicts[key] = host
        if sum(self._names_freed.values()) != self._seen_at_start.get(key):
            self.wake(key)  # a container went while this pass planned: look again

    def _invalidate(self, host_name: str) -> None:
        """Before any wake: the woken pass must see the engine afresh (hostview)."""
        session = self.hosts.sessions.get(host_name)
        if session is not None:
            session.invalidate()

    def _watch_events(self, host: Host, stop: threading.Event) -> None:
        selector = ownership.selector(self.instance)

        def on_event(event: ContainerEvent) -> None:
            if event.action.split(":")[0] in STATE_ACTIONS:  # not healthcheck exec_* chatter
                self._invalidate(host.metadata.name)
            resource = event.labels.get(ownership.LABEL_RESOURCE)
            if resource and event.action.split(":")[0] in EVENT_WAKE_ACTIONS:
                log.info("docker.event", host=host.metadata.name, action=event.action,
                         resource=resource)
                with contextlib.suppress(InvalidKey):  # a label of ours, but not a key
                    self.wake(Key.parse(resource))
        self._follow(host, stop, host.metadata.name, selector, (), on_event)

    def _watch_names(self, host: Host, stop: threading.Event) -> None:
        name = host.metadata.name

        def wake_conflicted() -> None:
            self._names_freed[name] = self._names_freed.get(name, 0) + 1
            for key, on in list(self._conflicts.items()):
                if on == name:
                    self.wake(key)

        def on_event(event: ContainerEvent) -> None:
            self._invalidate(name)
            if ownership.LABEL_RESOURCE not in event.labels:  # ours: the other stream's
                log.info("docker.name_freed", host=name, container=event.labels.get("name"))
                wake_conflicted()
        # A name freed before we subscribed would be missed: look again once subscribed.
        self._follow(host, stop, f"names:{name}", {}, NAME_FREED_ACTIONS, on_event,
                     on_subscribe=wake_conflicted)

    def _follow(self, host: Host, stop: threading.Event, key: str, labels: dict[str, str],
                actions: tuple[str, ...], handle: Callable[[ContainerEvent], None],
                on_subscribe: Callable[[], None] | None = None) -> None:
        """Subscribe, then relist (wake the Host and its resources on a reconnect, and call
        ``on_subscribe``), then follow; on any break, resume from the last event's time."""
        name = host.metadata.name
        since: float | None = None
        while not (stop.is_set() or self.stop.is_set()):
            try:
                engine = self.hosts.session(host).engine()
                stream = engine.events(labels, since=since if since else time.time(),
                                       actions=actions)
            except ControllerError as exc:
                log.info("events.unavailable", host=name, error=str(exc))
                self.wake(Key("Host", name))
                if stop.wait(EVENT_RECONNECT_S * 3):
                    return
                continue
            with self._lock:
                self._streams[key] = stream
            if stop.is_set():
                stream.close()
            if on_subscribe is not None:
                on_subscribe()
            if since is not None:  # reconnected: what happened while we were away?
                self._invalidate(name)
                self.wake_host(name)
            for event in stream:
                since = event.time
                handle(event)
            since = since or time.time()
            if stop.wait(EVENT_RECONNECT_S):
                return
            self.wake(Key("Host", name))  # the stream broke: is it down?

    def wake_host(self, name: str) -> None:
        """A Host's event stream came back: look at it and at everything on it."""
        self.wake(Key("Host", name))
        self.runtime.wake_dependents(Key("Host", name))
