"""The long-running reconciler: sources → snapshots → work queue → per-key reconcile.

Level-triggered: file changes, Git commits and Docker events only decide *when* a key is
looked at; each pass compares the full desired state of that key with freshly observed state.
Each source revision is one snapshot: an invalid revision is never partly applied — the last
good snapshot stays in force and the source reports Stalled with the errors.

A revision that reads fine may still be a mistake that would delete the fleet (an emptied
folder, a bulk move): ``reconciler.pruneguard`` holds such a revision, Stalled, until a person
approves it or the daemon runs with an opt-in flag.

The daemon knows no kind by name: each key's pass goes through the engine and the kind
registry (``reconciler.kinds``); a pass's ``Result`` says what comes next (forget, back off,
re-check later, wait for a dependency), and a change or a flip of a resource's state wakes
the resources that declare they depend on it.

Threads: one source watcher, each kind's background work (``Kind.background``: the Host kind's
Docker event watchers, the StreamSet kind's frame watch), a resync
timer, the control server, the metrics server and N workers. Each runs under a supervisor: a
thread that dies is reported by ``health`` and restarted with backoff; one that keeps dying
ends the daemon with a non-zero exit rather than leaving a process that looks healthy and does
nothing. Shutdown (SIGTERM) stops intake and ends every wait of every pass at once; the daemon
exits 0 within ``--shutdown-timeout``. SIGUSR1 dumps every thread's stack to standard error.
"""

from __future__ import annotations

import contextlib
import faulthandler
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from controllers.waiting import Stopped
from reconciler import control
from reconciler.control import ControlServer
from reconciler.engine import Engine
from reconciler.kinds import (
    REGISTRY,
    Outcome,
    PassContext,
    Result,
    key_of,
    retry,
)
from reconciler.metrics import Metrics
from reconciler.pruneguard import PrunePolicy, judge
from reconciler.sharing import FLEET, Sharing
from reconciler.sources import Snapshot, Source, SourceError
from reconciler.sources.record import SourceRecord
from reconciler.supervisor import RestartPolicy, Supervisor
from reconciler.workqueue import DEFAULT_MAX_BACKOFF_S, Priority, QueueStats, WorkQueue, jittered
from specs.validate import spec_hash
from state.atomic import write_atomic
from state.diskhealth import PROBE_EVERY_S, PROBE_FILE, WRITES
from state.errors import CorruptState, StateError, StateFenced
from state.keys import InvalidKey, Key
from state.models import Owner, ResourceStatus
from state.store import RESOURCES_DIR, Store

# SIGTERM → exit within this long (``docker stop`` kills after 10 s): every wait of a pass
# ends at once (controllers.waiting.Stopped); what a pass had done is recorded write-ahead.
SHUTDOWN_TIMEOUT_S = 10.0
SHUTDOWN_CLOSE_S = 1.5  # of which kept for closing engines and tunnels
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
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    metrics_address: tuple[str, int] | None = ("127.0.0.1", 9464)
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S
    prune_policy: PrunePolicy = field(default_factory=PrunePolicy)
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)


class Daemon:
    def __init__(self, store: Store, instance: Owner, source: Source, options: DaemonOptions,
                 say: Callable[[str], None]) -> None:
        self.store = store
        self.sharing: Sharing | None = None  # one replica of many: it acts on its shares
        self.instance = instance
        self.source = source
        self.options = options
        self.say = say
        self.stop = threading.Event()
        limits = {k.name: k.max_parallel for k in REGISTRY if k.max_parallel is not None}
        self.queue = WorkQueue(kind_limits=options.kind_limits or limits,
                               default_limit=options.workers,
                               base_backoff_s=options.base_backoff_s,
                               max_backoff_s=options.max_backoff_s)
        self.engine = Engine(store, instance, self._progress, stop=self.stop)
        self.snapshot: Snapshot | None = None
        self.source_record = SourceRecord(store, source.name, self._quarantine, self.mine)
        self._hashes: dict[Key, str] = {}
        self._shares: dict[Key, tuple[Snapshot | None, str]] = {}
        self._snapshot_lock = threading.Lock()
        self.supervisor = Supervisor(self.stop, options.restart_policy, self._thread_died)
        self._inflight: dict[Key, threading.Event] = {}  # each running pass's own stop
        self._last_ok: dict[Key, bool] = {}  # each key's last pass: dependents wake on a flip
        # Revisions a person approved once (``sync --approve-prune``) despite the prune guard.
        self._approved: set[str] = set()
        # Keys not worked while the state directory took no writes: worked when it does.
        self._parked: set[Key] = set()
        self._parked_lock = threading.Lock()
        self.metrics = Metrics(self)
        self.store.events.observers.append(self.metrics.event)
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
        if self.sharing is not None:
            sharing = self.sharing
            self.supervisor.spawn("shares", lambda: sharing.run(self.stop))
        for kind in REGISTRY:  # each kind's own watches and workers
            kind.background(self.engine.services, self)
        for i in range(self.options.workers + 2):
            self.supervisor.spawn(f"worker-{i}", self._worker)
        self.say(f"reconciler running (instance {self.instance}, source {self.source.name})")
        WRITES.root = self.store.root  # only the state directory's writes speak for it
        forget = WRITES.on_recover(self._writes_recovered)
        # The main thread watches the state disk: while writes fail, a probe every few seconds
        # notices the recovery even when nothing else would write.
        held = False
        while not self.stop.wait(PROBE_EVERY_S):
            WRITES.probe(self._probe_write)
            held = self._say_write_health(held)
        forget()
        control.close()
        return self._shutdown()

    def _probe_write(self) -> None:
        write_atomic(self.store.root / PROBE_FILE, b"ok\n")

    def _writes_recovered(self) -> None:
        """The state disk takes writes again: look at everything (a save that arrived while
        nothing could be recorded included, and what was parked meanwhile, pruning too), as
        ``reconciler sync`` does."""
        with self._parked_lock:
            parked, self._parked = self._parked, set()
        self.sync()
        for key in parked:
            self.queue.add(key, Priority.CHANGE)

    def _say_write_health(self, held: bool) -> bool:
        """Say once when the state directory stops taking writes and once when it takes them
        again (the main thread's look every few seconds); returns whether it is held now."""
        failing = WRITES.failing
        if failing is not None and not held:
            log.error("state.held", directory=str(self.store.root), error=failing.reason)
            self.say(f"the state directory {self.store.root} takes no writes ({failing.reason})"
                     ": acting on nothing until it does; status and health still answer")
        elif failing is None and held:
            log.info("state.writable", directory=str(self.store.root))
            self.say(f"the state directory {self.store.root} takes writes again: re-checking "
                     "every resource")
        return failing is not None

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handle(signum: int, _: FrameType | None) -> None:
            self.say(f"received {signal.Signals(signum).name}: finishing in-flight work")
            self.stop.set()
        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        # SIGUSR1: every thread's stack on standard error, the daemon going on. A daemon that
        # looks stuck (a pass that never ends) then says where each thread waits.
        if sys.__stderr__ is not None:
            with contextlib.suppress(ValueError, OSError):  # no file descriptor behind it
                faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True,
                                      chain=False)

    def _shutdown(self) -> int:
        self.queue.shut_down()
        self._interrupt()
        for part in self.engine.services.parts():
            part.stopping()  # unblock background reads (event streams) before the join
        budget = max(0.1, self.options.shutdown_timeout_s - SHUTDOWN_CLOSE_S)
        self.supervisor.join(time.monotonic() + budget)
        busy = self.queue.stats().processing
        if busy:  # a Docker call outlived the budget; the engine finishes it, a restart adopts
            log.warning("shutdown.abandoned", passes=busy)
            self.say(f"stopping with {busy} pass(es) still in a Docker call; the next run "
                     "picks them up")
        self.metrics.close()
        self.engine.close()
        if self.sharing is not None:
            self.sharing.close()  # the others take its shares now, not after the TTL
        if self.supervisor.fatal is not None:
            self.say(f"reconciler stopped: {self.supervisor.fatal}")
            return EXIT_THREAD_DIED
        self.say("reconciler stopped")
        return 0

    def _thread_died(self, name: str, why: str) -> None:
        self.store.events.append(DAEMON_RESOURCE, "Warning", "ThreadDied",
                                 f"thread {name} died ({why}); restarting it")

    def healthy(self) -> bool:
        stalled = self.sharing is not None and self.sharing.why_not is not None
        return self.supervisor.healthy() and WRITES.failing is None and not stalled

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
        except Stopped:
            return  # shutting down while the folder settled: nothing was read
        except Exception as exc:  # a loader bug must refuse one revision, not kill the watcher
            log.exception("source.load_crashed")
            self._record_source_failure(SourceError(f"reading the source failed: "
                                                    f"{type(exc).__name__}: {exc}"))
            return
        self._apply_snapshot(snapshot, first)

    def ask(self, resource: Key, request: str, value: str) -> str:
        """``reconciler promote``: record what a person asks of ``resource``, then look."""
        said = control.ask(self.store, resource, request, value)
        self.wake(resource)
        return said

    def approve_prune(self, revision: str) -> None:
        """Let ``revision`` through the prune guard once (``sync --approve-prune``)."""
        self._approved.add(revision)
        self.source.poke()

    def _recorded(self) -> list[Key]:
        """Every resource with a status file, readable or not: a record that cannot be parsed
        still stands for something we may own (it is moved aside when its key is worked).
        Names only: a replica asks every TTL/3, and no record need be read for it."""
        return self.store.keys()

    def _owned(self) -> list[Key]:
        """What the guard protects: recorded resources of owning kinds, and those of the
        revision in force (a create may be in flight before its record exists)."""
        with self._snapshot_lock:
            in_force = list(self._hashes)
        owning = REGISTRY.owning()
        return sorted({k for k in self._recorded() + in_force if k.kind in owning})

    def _guard(self, snapshot: Snapshot, new: dict[Key, str]) -> SourceError | None:
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
        if self.snapshot is not None and snapshot.revision == self.snapshot.revision:
            # The revision in force, read again (`sync`, a poke, a save that changed nothing,
            # a bad revision undone): nothing to judge or enqueue. Hashing every resource and
            # reading every record for the guard cost a `sync` at 1,000 resources ~0.1 s.
            self.source_record.loaded(snapshot, snapshot.revision)
            return
        new = {key_of(r): spec_hash(r) for r in snapshot.spec_set.resources}
        held = self._guard(snapshot, new)
        if held is not None:
            self._record_source_failure(held)
            return
        self._approved.discard(snapshot.revision)  # an approval is good for one application
        with self._snapshot_lock:
            old_revision = self.snapshot.revision if self.snapshot else None
            old = self._hashes
            self.snapshot, self._hashes = snapshot, new
        try:
            self.source_record.loaded(snapshot, old_revision)
        except (OSError, StateError) as exc:
            # A full or read-only state disk: the revision is in force all the same, and its
            # changes are queued below (their passes retry until they can record); the record
            # is written again when the disk recovers (sync).
            log.warning("source.unrecorded", revision=snapshot.revision, error=str(exc))
        if old_revision is None:  # the first revision in force: prune what it left out
            self._enqueue_recorded()
        changed = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
        # What depends on a changed resource is looked at too (a changed Host moves its
        # Deployments; a changed Deployment may forget its streams).
        changed = REGISTRY.closure(changed, snapshot.spec_set)
        if first:
            self._read_ahead(changed)  # each is asked below whether it converged already
        for key in REGISTRY.converge_order(changed):
            if first and self._converged(key, new.get(key)):
                self.queue.add(key, Priority.RESYNC)  # already done before the restart
            else:
                self.queue.forget(key)  # a changed spec deserves a fresh start, not a backoff
                self.queue.add(key, Priority.CHANGE)
                self._interrupt(key)  # a pass still on the old spec ends its wait now

    def _converged(self, key: Key, digest: str | None) -> bool:
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
            if key.kind in REGISTRY and key not in self._hashes:
                self.queue.add(key, Priority.CHANGE)

    def _record_source_failure(self, exc: SourceError) -> None:
        keep = self.snapshot.revision if self.snapshot else "none"
        self.source_record.refused(exc, keep)
        self.say(f"source refused (keeping revision {keep}):\n{exc}")

    # --- work --------------------------------------------------------------------------------

    def sync(self) -> None:
        """Look at the source now and re-check every resource (``reconciler sync``)."""
        self.source.poke()
        self._recheck(Priority.CHANGE)

    def _recheck(self, priority: Priority) -> None:
        """Queue every resource of the revision in force, its records read ahead in a few
        requests where the store is remote (this replica's own only)."""
        keys = list(self._hashes)
        self._read_ahead(keys)
        for key in keys:
            self.queue.add(key, priority)

    def _read_ahead(self, keys: Iterable[Key]) -> None:
        """The records of ``keys`` this daemon acts on, in a few requests where the store is
        remote (``Store.prefetch``); unreadable now, each pass finds out and says so."""
        with contextlib.suppress(StateError):
            self.store.prefetch([k for k in keys if self.mine(k)])

    def resume(self) -> None:
        """Shares were taken over: look at everything, pruning included (what the last holder
        left undone is this replica's now)."""
        self.sync()
        with contextlib.suppress(StateError):
            self._enqueue_recorded()

    def _resync_loop(self) -> None:
        rng = random.Random()
        while not self.stop.wait(jittered(self.options.resync_s, self.options.resync_jitter,
                                          rng)):
            self._recheck(Priority.RESYNC)

    def _worker(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:  # whatever happens below, the key is handed back to the queue
                if WRITES.failing is None:
                    self._work(key)
                else:
                    self._park(key)
            except (OSError, StateError):
                if WRITES.failing is None:
                    raise
                self._park(key)  # its pass met the held directory: it runs again after
            finally:
                self.queue.done(key)

    def _park(self, key: Key) -> None:
        """No pass while the state directory takes no writes: a pass could neither record
        what it is about to do (the write-ahead inventory) nor what it did, so it does
        nothing; the key is worked once writes return (``_writes_recovered``)."""
        with self._parked_lock:
            self._parked.add(key)

    def _work(self, key: Key) -> None:
        if not self.mine(key):
            return  # another replica's: its holder works it (a takeover re-checks all)
        started = time.monotonic()
        kind = key.kind
        try:
            with self.sharing.acting(key) if self.sharing else contextlib.nullcontext():
                result = self.reconcile(key)
        except CorruptState as exc:
            result = retry(key, str(exc), "CorruptState")
            self._quarantine(key, exc)
        except StateFenced as exc:  # its share moved to another replica mid-pass: theirs now
            log.info("reconcile.fenced", key=key, reason=str(exc))
            return
        except Exception as exc:  # guarded() already turns a kind's errors into results
            if WRITES.failing is not None and isinstance(exc, OSError | StateError):
                raise  # the held directory, not the resource: parked by the worker
            log.exception("reconcile.crashed", key=key)
            result = retry(key, f"{type(exc).__name__}: {exc}", type(exc).__name__)
        finally:
            self.metrics.observe(kind, time.monotonic() - started)
        self._follow_up(key, result)

    def _follow_up(self, key: Key, result: Result) -> None:
        """What a pass's result asks for: forget its backoff, back off, re-check later, or
        wait to be woken; and wake what depends on it when it changed or its state flipped."""
        if result.outcome is Outcome.STOPPED:
            return  # ended early on purpose (shutdown, or a newer spec re-runs it at once)
        for other in result.wake:
            self.queue.add(other, Priority.CHANGE)
        was_ok = self._last_ok.get(key)
        self._last_ok[key] = result.ok
        if (result.ok and (result.changed or was_ok is not True)) or (
                not result.ok and was_ok is True):
            self.wake_dependents(key)
        if result.ok:
            self.queue.forget(key)
            if key not in self._hashes:  # pruned: nothing more to remember of it
                self._last_ok.pop(key, None)
            elif result.after_s:  # done, and watched: looked at again then
                self.queue.add(key, Priority.CHANGE, delay_s=result.after_s)
            return
        if result.outcome is Outcome.WAIT:
            return  # its dependency's success (or deletion) wakes it; no backoff
        if result.outcome is Outcome.RECHECK:
            self.queue.add(key, Priority.CHANGE, delay_s=result.after_s)
            return
        self.metrics.error(key.kind, result.reason or "Failed")
        if result.outcome is Outcome.RETRY and not self.stop.is_set():
            delay = self.queue.retry(key, result.retry_within_s or None)
            self.store.events.append(key, "Normal", "Backoff",
                                     f"retrying in {delay:.1f}s (attempt "
                                     f"{self.queue.failures(key) + 1})")

    def _quarantine(self, key: Key, exc: CorruptState) -> None:
        """A status file that does not parse (a hand edit, a disk fault) must not leave its
        resource unrepaired forever: move it aside and reconcile from what the engines show
        (ownership is proven by labels). Its inventory is lost, so nothing is pruned on its
        word; the bytes stay beside it for a person."""
        key = _record_of(exc.path) or key  # a dependency's record may be the corrupt one
        moved = self.store.quarantine(exc.path)
        if moved is None:
            log.error("state.corrupt", key=key, path=str(exc.path), reason=exc.reason)
            return
        self.store.events.append(key, "Warning", "CorruptState",
                                 f"state file {exc.path} could not be read ({exc.reason}); "
                                 f"moved aside to {moved.name} and reconciling from what Docker "
                                 "shows")
        self.say(f"{key}: corrupt state file {exc.path} moved aside to {moved.name}")

    def reconcile(self, key: Key) -> Result:
        """One pass over one key, from the snapshot in force when it starts. Its stop event
        is its own: set at shutdown, and when a new revision changes the key (a readiness
        wait on the old spec must not delay the new one)."""
        stop = threading.Event()
        with self._snapshot_lock:
            snapshot = self.snapshot
            self._inflight[key] = stop
        if self.stop.is_set():
            stop.set()
        ctx = self._context(snapshot, stop)
        try:
            return self.engine.reconcile(ctx, key)
        finally:
            ctx.clients.close()
            with self._snapshot_lock:
                self._inflight.pop(key, None)

    def _interrupt(self, key: Key | None = None) -> None:
        """End the waits of the pass over ``key`` (of every pass when None)."""
        with self._snapshot_lock:
            stops = list(self._inflight.values()) if key is None else [
                self._inflight[key]] if key in self._inflight else []
        for stop in stops:
            stop.set()

    def _context(self, snapshot: Snapshot | None, stop: threading.Event) -> PassContext:
        return self.engine.context(snapshot.revision if snapshot else None,
                                   snapshot.spec_set if snapshot else None, hooks=self,
                                   stop=stop,
                                   wait_ready=False)  # a model load must not hold a worker

    def wake(self, key: Key) -> None:
        self.queue.add(key, Priority.CHANGE)

    def wake_dependents(self, key: Key) -> None:
        with self._snapshot_lock:
            snapshot = self.snapshot
        if snapshot is not None:
            for other in REGISTRY.dependents(snapshot.spec_set).get(key, []):
                self.queue.add(other, Priority.CHANGE)

    # --- what a pass and a kind's background work may ask (contract.Hooks, Runtime) ----------

    def spawn(self, name: str, run: Callable[[], None], forever: bool = True) -> None:
        self.supervisor.spawn(name, run, forever=forever)

    def mine(self, key: Key) -> bool:
        """Whether this daemon acts on ``key`` (always, unless it is one replica of many)."""
        return self.sharing is None or self.sharing.mine(key)

    # --- shares among replicas (reconciler.sharing) -------------------------------------------

    def share_of(self, key: Key) -> str:
        """The share ``key`` belongs to: its Host's (``Registry.root_of``), else the
        Host-less share. Kept per revision: every guarded write asks."""
        with self._snapshot_lock:
            snapshot = self.snapshot
            known = self._shares.get(key)
        if known is not None and known[0] is snapshot:
            return known[1]
        root = REGISTRY.root_of(key, snapshot.spec_set if snapshot else None, self.store)
        share = f"{root.kind}/{root.name}" if root is not None else FLEET
        with self._snapshot_lock:
            self._shares[key] = (snapshot, share)
        return share

    def shares(self) -> set[str]:
        """Every share there is work for: the revision's and the recorded resources'."""
        with self._snapshot_lock:
            keys = set(self._hashes)
        with contextlib.suppress(StateError):  # unreadable: the revision's shares only
            keys.update(self._recorded())
        return {FLEET, *(self.share_of(k) for k in keys)}

    # --- introspection (control socket) ------------------------------------------------------

    def records(self) -> list[ResourceStatus]:
        return self.store.list()

    def queue_stats(self) -> QueueStats:
        return self.queue.stats()

    def replica_state(self) -> tuple[int, bool] | None:
        if self.sharing is None:
            return None
        return len(self.sharing.held()), self.sharing.why_not is None

    def api_calls(self) -> Iterable[tuple[str, float]]:
        services = self.engine.services
        for part in services.parts():
            yield from part.calls()
        for what, calls in list(services.http_calls.items()):
            yield f"http:{what}", calls
        yield from self.store.api_calls()

    def describe(self) -> dict[str, Any]:
        stats = self.queue.stats()
        parts: dict[str, Any] = {}
        for part in self.engine.services.parts():
            parts.update(part.describe())
        return {
            "instance": self.instance,
            "source": self.source.name,
            "revision": self.snapshot.revision if self.snapshot else None,
            "uptimeSeconds": round(time.time() - self.started, 1),
            "queue": {"depth": stats.depth, "processing": stats.processing,
                      "idleWorkers": stats.waiting,
                      "delayed": stats.delayed},
            **parts,
            "threads": {name: state for name, state in sorted(self.supervisor.states.items())
                        if state != "running" or self.supervisor.deaths.get(name)},
            "threadDeaths": sum(self.supervisor.deaths.values()),
            "fatal": self.supervisor.fatal,
            **_write_health(),
            **({"replica": self.sharing.describe()} if self.sharing is not None else {}),
            "dockerCalls": sum(n for what, n in self.api_calls() if what.startswith("docker:")),
        }


def _write_health() -> dict[str, Any]:
    """What ``health`` and ``status --live`` say about the state disk while writes fail."""
    failing = WRITES.failing
    if failing is None:
        return {}
    return {"stateWrites": {"directory": str(WRITES.root), "failing": failing.reason,
                            "sinceSeconds": round(time.time() - failing.since, 1),
                            "failures": failing.failures}}


def _record_of(path: Path) -> Key | None:
    """The resource whose status file ``path`` is (``resources/<Kind>/<name>.json``), so a
    corrupt record is reported under its own resource, not under the one whose pass read it."""
    if path.suffix != ".json" or path.parent.parent.name != RESOURCES_DIR:
        return None
    try:
        return Key(path.parent.name, path.stem)
    except InvalidKey:
        return None
