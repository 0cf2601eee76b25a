"""The long-running reconciler: sources → snapshots → work queue → per-key reconcile.

Level-triggered: file changes, Git commits and Docker events only decide *when* a key is
looked at; each pass compares the full desired state of that key with freshly observed state.
Each source revision is one snapshot: an invalid revision is never partly applied — the last
good snapshot stays in force and the source reports Stalled with the errors.

A revision that reads fine may still be a mistake that would delete the fleet (an emptied
folder, a bulk move): ``reconciler.pruneguard`` holds such a revision, Stalled, until a person
approves it or the daemon runs with an opt-in flag.

Threads: one source watcher, one Docker event watcher per reachable Host, a resync timer, the
control server, the metrics server and N workers. Each runs under a supervisor: a thread that
dies is reported by ``health`` and restarted with backoff; one that keeps dying ends the daemon
with a non-zero exit rather than leaving a process that looks healthy and does nothing.
Shutdown (SIGTERM) stops intake, lets the workers finish what they hold, and exits 0.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import structlog

from controllers import ownership
from controllers.docker_client import ContainerEvent, EventStream
from controllers.errors import ControllerError
from reconciler import streamsets
from reconciler.control import ControlServer
from reconciler.engine import Engine
from reconciler.metrics import Metrics
from reconciler.pruneguard import PrunePolicy, judge
from reconciler.sources import Snapshot, Source, SourceError
from reconciler.supervisor import RestartPolicy, Supervisor
from reconciler.workqueue import Priority, WorkQueue, jittered
from specs.models import Deployment, Host, StreamSet
from specs.validate import spec_hash
from state.errors import CorruptState, StateError
from state.models import ResourceStatus
from state.store import Store

SOURCE_RESOURCE = "Source/specs"
EVENT_WAKE_ACTIONS = ("die", "stop", "kill", "destroy", "oom", "pause", "health_status")
# Events that free a container name (a foreign container in our way was removed or renamed).
NAME_FREED_ACTIONS = ("destroy", "rename")
EVENT_RECONNECT_S = 1.0
SHUTDOWN_GRACE_S = 60.0
# Kinds whose records stand for things we created; their count is what the prune guard protects.
OWNING_KINDS = ("Deployment", "StreamSet")
PRUNABLE_KINDS = ("Deployment", "Host", "StreamSet")
DAEMON_RESOURCE = "Daemon/threads"
EXIT_THREAD_DIED = 3  # a thread kept dying (reconciler.supervisor)
log = structlog.get_logger("reconciler.daemon")


@dataclass
class DaemonOptions:
    resync_s: float = 300.0
    resync_jitter: float = 0.1
    workers: int = 16
    kind_limits: dict[str, int] | None = None
    base_backoff_s: float = 0.5
    max_backoff_s: float = 60.0
    metrics_address: tuple[str, int] | None = ("127.0.0.1", 9464)
    prune_policy: PrunePolicy = field(default_factory=PrunePolicy)
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)


class Daemon:
    def __init__(self, store: Store, instance: str, source: Source, options: DaemonOptions,
                 say: Callable[[str], None]) -> None:
        self.store = store
        self.instance = instance
        self.source = source
        self.options = options
        self.say = say
        self.stop = threading.Event()
        self.queue = WorkQueue(kind_limits=options.kind_limits or {"Host": 2},
                               default_limit=options.workers,
                               base_backoff_s=options.base_backoff_s,
                               max_backoff_s=options.max_backoff_s)
        self.engine = Engine(store, instance, self._progress)
        self.snapshot: Snapshot | None = None
        self._hashes: dict[str, str] = {}
        self._snapshot_lock = threading.Lock()
        self._watchers: dict[str, threading.Event] = {}
        self._streams: dict[str, EventStream] = {}
        self.supervisor = Supervisor(self.stop, options.restart_policy, self._thread_died)
        # Revisions a person approved once (``sync --approve-prune``) despite the prune guard.
        self._approved: set[str] = set()
        # Resources whose container name is held by a foreign container (a Conflict).
        self._conflicts: set[str] = set()
        self._names_freed = 0  # counts name-freeing events, to close the plan/add race
        self.metrics = Metrics(self)
        self.started = time.time()

    # --- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (or ``stop`` is set). The caller holds the state lock."""
        self._install_signals()
        if self.options.metrics_address is not None:
            self.metrics.serve(*self.options.metrics_address)
        control = ControlServer(self.store.root, self)
        control.start()
        self._load_source(first=True)
        self.supervisor.spawn("source", lambda: self.source.watch(self.stop, self._source_changed))
        self.supervisor.spawn("resync", self._resync_loop)
        for i in range(self.options.workers + 2):
            self.supervisor.spawn(f"worker-{i}", self._worker)
        self.say(f"reconciler running (instance {self.instance}, source {self.source.name})")
        self.stop.wait()
        control.close()
        return self._shutdown()

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handle(signum: int, _: FrameType | None) -> None:
            self.say(f"received {signal.Signals(signum).name}: finishing in-flight work")
            self.stop.set()
        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _shutdown(self) -> int:
        self.queue.shut_down()
        for name in list(self._watchers):
            self._stop_watcher(name)
        self.supervisor.join(time.monotonic() + SHUTDOWN_GRACE_S)
        self.metrics.close()
        self.engine.close()
        if self.supervisor.fatal is not None:
            self.say(f"reconciler stopped: {self.supervisor.fatal}")
            return EXIT_THREAD_DIED
        self.say("reconciler stopped")
        return 0

    def _thread_died(self, name: str, why: str) -> None:
        self.store.events.append(DAEMON_RESOURCE, "Warning", "ThreadDied",
                                 f"thread {name} died ({why}); restarting it")

    def healthy(self) -> bool:
        return self.supervisor.healthy()

    def _progress(self, resource: str, message: str) -> None:
        log.info("progress", resource=resource, message=message)

    # --- source and snapshots ----------------------------------------------------------------

    def _source_changed(self) -> None:
        self._load_source(first=False)

    def _load_source(self, first: bool) -> None:
        try:
            snapshot = self.source.load()
        except SourceError as exc:
            self._record_source_failure(exc)
            return
        except Exception as exc:  # a loader bug must refuse one revision, not kill the watcher
            log.exception("source.load_crashed")
            self._record_source_failure(SourceError(f"reading the source failed: "
                                                    f"{type(exc).__name__}: {exc}"))
            return
        self._apply_snapshot(snapshot, first)

    def approve_prune(self, revision: str) -> None:
        """Let ``revision`` through the prune guard once (``sync --approve-prune``)."""
        self._approved.add(revision)
        self.source.poke()

    def _recorded(self) -> list[str]:
        """Every resource with a status file, readable or not: a record that cannot be parsed
        still stands for something we may own (it is moved aside when its key is worked)."""
        records, broken = self.store.scan()
        keys = [r.resource for r in records]
        keys += [f"{b.path.parent.name}/{b.path.name.removesuffix('.json')}" for b in broken
                 if b.path.name.endswith(".json") and b.path.parent.parent.name == "resources"]
        return keys

    def _owned(self) -> list[str]:
        """What the guard protects: recorded resources of owning kinds, and those of the
        revision in force (a create may be in flight before its record exists)."""
        with self._snapshot_lock:
            in_force = list(self._hashes)
        return sorted({k for k in self._recorded() + in_force
                       if k.split("/", 1)[0] in OWNING_KINDS})

    def _guard(self, snapshot: Snapshot, new: dict[str, str]) -> SourceError | None:
        """Hold a revision that would delete too much of what we own (pruneguard)."""
        try:
            owned = self._owned()
        except StateError as exc:
            return SourceError(f"cannot judge revision {snapshot.revision}: the state "
                               f"directory cannot be read ({exc}); nothing is pruned until "
                               "it can", revision=snapshot.revision)
        verdict = judge(owned, set(new), snapshot.revision, self.options.prune_policy,
                        approved=snapshot.revision in self._approved)
        if not verdict.held:
            return None
        return SourceError(verdict.message, revision=snapshot.revision,
                           reason_code=verdict.reason)

    def _apply_snapshot(self, snapshot: Snapshot, first: bool) -> None:
        new = {f"{r.kind}/{r.metadata.name}": spec_hash(r) for r in snapshot.spec_set.resources}
        held = self._guard(snapshot, new)
        if held is not None:
            self._record_source_failure(held)
            return
        self._approved.discard(snapshot.revision)  # an approval is good for one application
        with self._snapshot_lock:
            old_revision = self.snapshot.revision if self.snapshot else None
            old = self._hashes
            self.snapshot, self._hashes = snapshot, new
            self.engine.revision = snapshot.revision
        self._record_source_ready(snapshot, old_revision)
        if old_revision is None:  # the first revision in force: prune what it left out
            self._enqueue_recorded()
        changed = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
        hosts_changed = {k.split("/", 1)[1] for k in changed if k.startswith("Host/")}
        for dep in snapshot.spec_set.deployments:
            if dep.spec.host in hosts_changed:
                changed.add(f"Deployment/{dep.metadata.name}")
        for ss in snapshot.spec_set.streamsets:  # a changed Deployment may forget its streams
            if f"Deployment/{ss.spec.deployment}" in changed:
                changed.add(f"StreamSet/{ss.metadata.name}")
        for key in sorted(changed, key=lambda k: (not k.startswith("Host/"), k)):
            if first and self._converged(key, new.get(key)):
                self.queue.add(key, Priority.RESYNC)  # already done before the restart
            else:
                self.queue.forget(key)  # a changed spec deserves a fresh start, not a backoff
                self.queue.add(key, Priority.CHANGE)

    def _converged(self, key: str, digest: str | None) -> bool:
        try:
            record = self.store.load(key)
        except StateError:
            return False  # its worker moves a corrupt record aside and reconciles afresh
        if record is None or digest is None:
            return False
        ready = record.condition("Ready")
        return record.observed_generation == digest and ready is not None and (
            ready.status == "True")

    def _enqueue_recorded(self) -> None:
        """Resources recorded by an earlier run but absent now must be pruned."""
        for key in self._recorded():
            if key.split("/", 1)[0] in PRUNABLE_KINDS and key not in self._hashes:
                self.queue.add(key, Priority.CHANGE)

    def _record_source_ready(self, snapshot: Snapshot, old_revision: str | None) -> None:
        def mutate(st: ResourceStatus) -> None:
            st.applied_revision = snapshot.revision
            st.facts["source"] = self.source.name
            st.facts["resources"] = len(snapshot.spec_set.resources)
            st.set_condition("Ready", "True", "Loaded", f"revision {snapshot.revision}")
            st.set_condition("Stalled", "False", "Loaded", "")
        self._update_source(mutate)
        if snapshot.revision != old_revision:
            self.store.events.append(SOURCE_RESOURCE, "Normal", "Revision",
                                     f"loaded revision {snapshot.revision} "
                                     f"({len(snapshot.spec_set.resources)} resources)")

    def _record_source_failure(self, exc: SourceError) -> None:
        message = str(exc)
        keep = self.snapshot.revision if self.snapshot else "none"
        reason = exc.reason_code

        def mutate(st: ResourceStatus) -> None:
            st.facts["source"] = self.source.name
            st.facts["rejectedRevision"] = exc.revision
            st.set_condition("Stalled", "True", reason, f"keeping revision {keep}: {message}")
            st.set_condition("Ready", "False", reason, message)
        before = self._update_source(None)
        stalled = before is not None and (c := before.condition("Stalled")) is not None and (
            c.status == "True" and c.message.endswith(message))
        self._update_source(mutate)
        if not stalled:
            self.store.events.append(SOURCE_RESOURCE, "Warning", reason,
                                     f"revision {exc.revision or '?'} refused, keeping {keep}: "
                                     f"{message}")
        self.say(f"source refused (keeping revision {keep}):\n{message}")

    def _update_source(self, mutate: Callable[[ResourceStatus], None] | None
                       ) -> ResourceStatus | None:
        """Read (``mutate`` None) or update the Source record. It holds only facts about the
        source, nothing we own, so a corrupt one is moved aside and started afresh rather
        than killing the thread that watches the source."""
        try:
            if mutate is None:
                return self.store.load(SOURCE_RESOURCE)
            return self.store.update(SOURCE_RESOURCE, "Source", "specs", mutate)
        except CorruptState as exc:
            self._quarantine(SOURCE_RESOURCE, exc)
            if mutate is None:
                return None
            return self.store.update(SOURCE_RESOURCE, "Source", "specs", mutate)

    # --- work --------------------------------------------------------------------------------

    def sync(self) -> None:
        """Look at the source now and re-check every resource (``reconciler sync``)."""
        self.source.poke()
        for key in list(self._hashes):
            self.queue.add(key, Priority.CHANGE)

    def _resync_loop(self) -> None:
        rng = random.Random()
        while not self.stop.wait(jittered(self.options.resync_s, self.options.resync_jitter,
                                          rng)):
            for key in list(self._hashes):
                self.queue.add(key, Priority.RESYNC)

    def _worker(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:  # whatever happens below, the key is handed back to the queue
                self._work(key)
            finally:
                self.queue.done(key)

    def _work(self, key: str) -> None:
        started = time.monotonic()
        kind = key.split("/", 1)[0]
        try:
            ok, retry, reason = self.reconcile(key)
        except CorruptState as exc:
            ok, retry, reason = False, True, "CorruptState"
            self._quarantine(key, exc)
        except Exception as exc:
            log.exception("reconcile.crashed", key=key)
            ok, retry, reason = False, True, type(exc).__name__
        finally:
            self.metrics.observe(kind, time.monotonic() - started)
        if ok:
            self.queue.forget(key)
            return
        self.metrics.error(kind, reason)
        if retry and not self.stop.is_set():
            delay = self.queue.retry(key)
            self.store.events.append(key, "Normal", "Backoff",
                                     f"retrying in {delay:.1f}s (attempt "
                                     f"{self.queue.failures(key) + 1})")

    def _quarantine(self, key: str, exc: CorruptState) -> None:
        """A status file that does not parse (a hand edit, a disk fault) must not leave its
        resource unrepaired forever: move it aside and reconcile from what the engines show
        (ownership is proven by labels). Its inventory is lost, so nothing is pruned on its
        word; the bytes stay beside it for a person."""
        moved = self.store.quarantine(exc.path)
        if moved is None:
            log.error("state.corrupt", key=key, path=str(exc.path), reason=exc.reason)
            return
        self.store.events.append(key, "Warning", "CorruptState",
                                 f"state file {exc.path} could not be read ({exc.reason}); "
                                 f"moved aside to {moved.name} and reconciling from what Docker "
                                 "shows")
        self.say(f"{key}: corrupt state file {exc.path} moved aside to {moved.name}")

    def reconcile(self, key: str) -> tuple[bool, bool, str]:
        """One pass over one key → (ok, retry, reason)."""
        kind, name = key.split("/", 1)
        with self._snapshot_lock:
            snapshot = self.snapshot
        resources = snapshot.spec_set.resources if snapshot else []
        resource = next((r for r in resources if r.kind == kind and r.metadata.name == name),
                        None)
        if isinstance(resource, Host):
            return self._reconcile_host(resource)
        if isinstance(resource, Deployment):
            assert snapshot is not None
            freed = self._names_freed
            rp = self.engine.plan_one(resource, snapshot.spec_set)
            if rp.plan is not None and rp.plan.conflict:
                self._conflicts.add(key)  # retried when a container on its Host goes
                if self._names_freed != freed:  # one went while we planned: look again
                    self.queue.add(key, Priority.CHANGE)
            else:
                self._conflicts.discard(key)
            outcome = self.engine.apply_one(rp, None)
            if outcome.ok:  # a new or recreated service knows no streams: re-check them
                self._wake_streamsets(resource.metadata.name)
            return outcome.ok, outcome.retry, rp.error_reason or "ApplyFailed"
        if isinstance(resource, StreamSet):
            assert snapshot is not None
            waiting = streamsets.deployment_ready(self.engine, resource, snapshot.spec_set)
            rp = streamsets.plan_one(self.engine, resource, snapshot.spec_set, waiting)
            if waiting is not None:  # no backoff: the Deployment's success wakes it
                self.engine.fail(rp, "WaitingForDeployment", waiting, stalled=False)
                return True, False, ""
            outcome = self.engine.apply_streamset(rp, snapshot.spec_set, None)
            return outcome.ok, outcome.retry, outcome.message.split(":", 1)[0]
        if snapshot is None:
            return True, False, ""  # nothing loaded yet: never prune on no information
        if kind == "Deployment" and (users := self._streamsets_using(name)):
            # Dependents first: their streams are deleted while the service still runs.
            return False, True, f"waiting for {', '.join(users)} to be torn down"
        record = self.store.load(key)
        outcome = self.engine.delete_one(snapshot.spec_set, key)
        if kind == "Host":
            self._stop_watcher(name)
        elif outcome.ok and record is not None and record.facts.get("host"):
            # What it held (GPUs, rule 10) is free now: a Deployment refused for it may go.
            self._wake_deployments(str(record.facts["host"]))
        return outcome.ok, outcome.retry, "PruneFailed"

    def _reconcile_host(self, host: Host) -> tuple[bool, bool, str]:
        name = host.metadata.name
        was_down = name in self.engine.host_errors
        if not self.engine.observe_host(host):
            self._wake_deployments(name)  # they turn Degraded (HostUnavailable), never deleted
            record = self.store.load(f"Host/{name}")
            refused = record is not None and (c := record.condition("Stalled")) is not None and (
                c.status == "True")
            return False, not refused, "HostUnreachable"
        self._ensure_watcher(host)
        if was_down:
            self._wake_deployments(name)
        return True, False, ""

    def _wake_deployments(self, host_name: str) -> None:
        with self._snapshot_lock:
            deployments = self.snapshot.spec_set.deployments if self.snapshot else []
        for dep in deployments:
            if dep.spec.host == host_name:
                self.queue.add(f"Deployment/{dep.metadata.name}", Priority.CHANGE)

    def _streamsets_using(self, deployment: str) -> list[str]:
        return [r.resource for r in self.store.list("StreamSet")
                if r.facts.get("deployment") == deployment]

    def _wake_streamsets(self, deployment: str) -> None:
        with self._snapshot_lock:
            sets = self.snapshot.spec_set.streamsets if self.snapshot else []
        for ss in sets:
            if ss.spec.deployment == deployment:
                self.queue.add(f"StreamSet/{ss.metadata.name}", Priority.CHANGE)

    # --- Docker events -----------------------------------------------------------------------

    def _ensure_watcher(self, host: Host) -> None:
        name = host.metadata.name
        if name in self._watchers and not self._watchers[name].is_set():
            return
        stop = threading.Event()
        self._watchers[name] = stop
        spawn = self.supervisor.spawn
        spawn(f"events-{name}", lambda: self._watch_events(host, stop), forever=False)
        spawn(f"names-{name}", lambda: self._watch_names(host, stop), forever=False)

    def _stop_watcher(self, name: str) -> None:
        stop = self._watchers.pop(name, None)
        if stop is not None:
            stop.set()
        for key in (name, f"names:{name}"):
            stream = self._streams.pop(key, None)
            if stream is not None:
                stream.close()  # unblocks the watcher's read

    def _watch_events(self, host: Host, stop: threading.Event) -> None:
        """Our containers' events: a killed container is repaired within seconds, without
        waiting for a resync."""
        selector = ownership.selector(self.instance)

        def wake(event: ContainerEvent) -> None:
            resource = event.labels.get(ownership.LABEL_RESOURCE)
            if resource and event.action.split(":")[0] in EVENT_WAKE_ACTIONS:
                log.info("docker.event", host=host.metadata.name, action=event.action,
                         resource=resource)
                self.queue.add(resource, Priority.CHANGE)
        self._follow(host, stop, host.metadata.name, selector, (), wake)

    def _watch_names(self, host: Host, stop: threading.Event) -> None:
        """Any container removed or renamed on the Host: a name we wanted may be free now, so
        a resource held in Conflict by a foreign container is tried again at once rather
        than at the next resync."""
        def wake_all() -> None:
            self._names_freed += 1
            for resource in self._conflicted(host.metadata.name):
                self.queue.add(resource, Priority.CHANGE)

        def wake(event: ContainerEvent) -> None:
            if ownership.LABEL_RESOURCE not in event.labels:  # ours: the other stream's
                log.info("docker.name_freed", host=host.metadata.name,
                         container=event.labels.get("name"))
                wake_all()
        # A name freed before we subscribed would be missed: look again once subscribed.
        self._follow(host, stop, f"names:{host.metadata.name}", {}, NAME_FREED_ACTIONS, wake,
                     on_subscribe=wake_all)

    def _conflicted(self, host_name: str) -> list[str]:
        with self._snapshot_lock:
            deployments = self.snapshot.spec_set.deployments if self.snapshot else []
        return [f"Deployment/{d.metadata.name}" for d in deployments
                if d.spec.host == host_name and f"Deployment/{d.metadata.name}" in self._conflicts]

    def _follow(self, host: Host, stop: threading.Event, key: str, labels: dict[str, str],
                actions: tuple[str, ...], handle: Callable[[ContainerEvent], None],
                on_subscribe: Callable[[], None] | None = None) -> None:
        """Subscribe, then relist (wake every resource of the Host on a reconnect, and call
        ``on_subscribe``), then follow; on any break, resume from the last event's time."""
        name = host.metadata.name
        since: float | None = None
        while not (stop.is_set() or self.stop.is_set()):
            try:
                engine = self.engine.session(host).engine()
                stream = engine.events(labels, since=since if since else time.time(),
                                       actions=actions)
            except ControllerError as exc:
                log.info("events.unavailable", host=name, error=str(exc))
                self.queue.add(f"Host/{name}", Priority.CHANGE)
                if stop.wait(EVENT_RECONNECT_S * 3):
                    return
                continue
            self._streams[key] = stream
            if stop.is_set():
                stream.close()
            if on_subscribe is not None:
                on_subscribe()
            if since is not None:  # reconnected: what happened while we were away?
                self.queue.add(f"Host/{name}", Priority.CHANGE)
                self._wake_deployments(name)
            for event in stream:
                since = event.time
                handle(event)
            since = since or time.time()
            if stop.wait(EVENT_RECONNECT_S):
                return
            self.queue.add(f"Host/{name}", Priority.CHANGE)  # the stream broke: is it down?

    # --- introspection (control socket) ------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        stats = self.queue.stats()
        return {
            "instance": self.instance,
            "source": self.source.name,
            "revision": self.snapshot.revision if self.snapshot else None,
            "uptimeSeconds": round(time.time() - self.started, 1),
            "queue": {"depth": stats.depth, "processing": stats.processing,
                      "delayed": stats.delayed},
            "hosts": {n: ("unreachable" if n in self.engine.host_errors else "ok")
                      for n in self.engine.sessions},
            "threads": {name: state for name, state in sorted(self.supervisor.states.items())
                        if state != "running" or self.supervisor.deaths.get(name)},
            "threadDeaths": sum(self.supervisor.deaths.values()),
            "fatal": self.supervisor.fatal,
        }
