"""Images brought to their Hosts: one pull per image per Host, beside the work queue.

A multi-GB image takes minutes to pull; a worker that waited for it would starve every other
resource. So a pull is a job on this board: the first resource that needs an image on a Host
starts it in a thread of its own, every other resource needing the same image there joins it,
and each pass only looks (``Progressing``, reason ``Pulling``, with bytes done and total) until
the board wakes its waiters. A one-shot ``apply`` waits for it, printing the same progress.

Before pulling, the image's compressed size from the registry's manifest is compared with the
room under the engine's data root: too little is refused before anything is written. After
pulling, a pinned digest must be among the engine's repo digests for the image: the engine
checks content against the digest it asked for, and we check that it asked for ours.

Credentials are resolved when the pull starts (registered with the redactor at once) and live
in the pull call's header only: never in a file on the Host, a label, a log, an event, status
or a plan. Nothing running is stopped for a pull: a failed one leaves the old service as it was.
"""

from __future__ import annotations

import contextvars
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import structlog

from controllers.clients.registry import RegistryUnavailable, manifest_size
from controllers.errors import ControllerError, PullFailed, StillProgressing
from controllers.kinds.host.archives import archive_holding
from controllers.kinds.host.session import HostSession
from controllers.secrets import resolve
from controllers.services import Part, Services
from controllers.waiting import until
from specs.images import ImageRef, login_for, parse_image, server_address, source_of
from specs.models import HostSpec, RegistryLogin, SecretRef
from specs.trust import enforced
from state.keys import Key

log = structlog.get_logger("controllers.pulls")

WAIT_PACE_S = 0.5  # how often a waiting ``apply`` looks at a pull
RECHECK_S = 5.0  # the daemon's look at a pull under way (the board wakes it when done)
LOG_EVERY_S = 10.0  # a pull's progress in the log
# A pull whose registry went away mid-pull: the engine retries each layer for about 75 s; after
# this long without a byte the pull is given up (Degraded, PullFailed) and the queue's backoff
# tries again, from the layers the engine kept. RECONCILER_PULL_STALL_S sets it (a slow link
# that pauses longer).
STALL_S = 20.0
STALL_ENV = "RECONCILER_PULL_STALL_S"


def stall_s() -> float:
    """The stall limit in force: the environment's (a number of at least 1 s), else STALL_S."""
    try:
        value = float(os.environ.get(STALL_ENV, ""))
    except ValueError:
        return STALL_S
    return value if math.isfinite(value) and value >= 1 else STALL_S
TAG_CHECK_S = 60.0  # a tag's digest is asked of the registry at most this often per Host
ROOM_MARGIN = 1.1  # a pull needs its compressed size and a tenth more free
DONE_STATES = ("Download complete", "Pull complete", "Already exists")
MB = 1e6
Wake = Callable[[Key], None]


@dataclass(frozen=True)
class ImageNeed:
    """An image a resource needs on its Host that the Host lacks (or whose tag has moved)."""

    image: ImageRef  # as the Host gets it (its mirror's copy, where it has one)
    host: str
    cause: str
    login: RegistryLogin | None
    archive: str | None = None  # loaded from this ``docker save`` archive, not pulled
    asked: str = ""  # the reference the spec gave, when a mirror serves it

    @property
    def registry(self) -> str:
        if self.archive is not None:
            return f"archive {self.archive}"
        who = f"as {self.login.username}" if self.login is not None else "anonymously"
        mirror = f", mirroring {parse_image(self.asked).registry}" if self.asked else ""
        return f"registry {self.image.registry} ({who}{mirror})"

    @property
    def verb(self) -> str:
        return "pull" if self.archive is None else "load"

    @property
    def target(self) -> str:
        return f"image {self.image.text}"


def need_for(asked: ImageRef, host: HostSpec, host_name: str, cause: str) -> ImageNeed:
    """How ``host`` gets ``asked``: from an archive it lists that holds it, else pulled (from
    its mirror, where it has one)."""
    archive = archive_holding(host.images.archives, asked) if host.images.archives else None
    image = asked if archive is not None else source_of(host, asked)
    return ImageNeed(image, host_name, cause, login_for(host.registries, image.registry),
                     archive, asked.text if image is not asked else "")


def auth_config(need: ImageNeed) -> dict[str, str] | None:
    """The engine's auth config for ``need``'s registry, its password read now (and
    registered for redaction); None without a login. Raises SecretUnavailable."""
    login = need.login
    if login is None:
        return None
    ref = SecretRef.model_construct(name=f"password of registry {login.server}",
                                    fromEnv=login.password.fromEnv,
                                    fromFile=login.password.fromFile)
    return {"username": login.username, "password": resolve(ref),
            "serveraddress": server_address(need.image.registry)}


@dataclass
class PullJob:
    """One image being brought to one Host, and who waits for it."""

    need: ImageNeed
    started: float = field(default_factory=time.monotonic)
    state: Literal["checking", "pulling", "done", "failed"] = "checking"
    layers: dict[str, list[int]] = field(default_factory=dict)  # id -> [done, total] bytes
    complete: set[str] = field(default_factory=set)
    size_bytes: int | None = None  # compressed, from the registry's manifest
    error: ControllerError | None = None
    image_id: str = ""
    repo_digest: str = ""
    waiters: dict[Key, Wake] = field(default_factory=dict)
    unreported: set[Key] = field(default_factory=set)
    finished: threading.Event = field(default_factory=threading.Event)
    retrying: str = ""  # the engine's last word while the registry does not answer
    _logged: float = 0.0
    _moved: float = field(default_factory=time.monotonic)  # when a byte last came

    def summary(self) -> str:
        """``pulling X from registry R: 12.3 of 45.6 MB, 2 of 5 layers`` (like docker pull)."""
        if self.state == "checking":
            return (f"{self.need.verb}ing {self.need.image.text} from {self.need.registry}: "
                    "checking size")
        done = sum(d for d, _ in self.layers.values())
        # the layers it downloads (those the Host has are not counted); until their sizes
        # are known, the manifest's size
        total = sum(t for _, t in self.layers.values()) or (self.size_bytes or 0)
        amount = f"{done / MB:.1f} of {total / MB:.1f} MB" if total else f"{done / MB:.1f} MB"
        retrying = f" ({self.retrying})" if self.retrying else ""
        return (f"{self.need.verb}ing {self.need.image.text} from {self.need.registry}: {amount}, "
                f"{len(self.complete)} of {len(self.layers)} layers, "
                f"{time.monotonic() - self.started:.0f}s{retrying}")

    def note(self, message: dict[str, Any]) -> None:
        """One progress message of the engine's pull stream."""
        self.state = "pulling"
        layer, status = str(message.get("id") or ""), str(message.get("status") or "")
        if not layer or status.startswith(("Pulling from", "Digest", "Status")):
            return
        entry = self.layers.setdefault(layer, [0, 0])
        detail = message.get("progressDetail") or {}
        if status == "Downloading" and detail.get("total"):
            entry[:] = [int(detail.get("current") or 0), int(detail["total"])]
            self._moved, self.retrying = time.monotonic(), ""
        elif status in DONE_STATES:
            self.complete.add(layer)
            entry[0] = entry[1]
            self._moved, self.retrying = time.monotonic(), ""
        elif status.startswith("Retrying"):
            self.retrying = f"layer {layer[:12]}: {status}"
            stalled = time.monotonic() - self._moved
            if stalled >= stall_s():
                raise PullFailed(f"{self.need.target} on Host {self.need.host}: the registry "
                                 f"stopped answering mid-pull (no bytes for {stalled:.0f}s; "
                                 f"the engine was retrying, {self.retrying}); the layers "
                                 "already pulled are kept and it is tried again")
        if time.monotonic() - self._logged >= LOG_EVERY_S:
            self._logged = time.monotonic()
            log.info("image.pull", host=self.need.host, progress=self.summary())


class Pulls(Part):
    """The board of pulls under way in this process, one per (Host, image)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._jobs: dict[tuple[str, str], PullJob] = {}
        self._tags: dict[tuple[str, str], tuple[float, str]] = {}  # when asked, digest
        self._lock = threading.Lock()

    @classmethod
    def made(cls, services: Services) -> Self:
        return cls(services)

    def describe(self) -> dict[str, Any]:
        with self._lock:
            jobs = list(self._jobs.values())
        return {"pulls": [job.summary() for job in jobs if job.state != "failed"]}

    def join(self, session: HostSession, need: ImageNeed, waiter: Key, wake: Wake) -> PullJob:
        """The pull of ``need`` on its Host: the one under way (joined), or a new one. A
        failed pull is given once to each resource that waited for it; the next ask starts
        a new one (the queue's backoff paces them)."""
        key = (need.host, need.image.pull)
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.state == "failed":
                if waiter in job.unreported:
                    job.unreported.discard(waiter)
                    if not job.unreported:
                        del self._jobs[key]
                    return job
                job = None
            if job is None:
                auth = auth_config(need)  # a missing password fails this pass, not a thread
                job = self._jobs[key] = PullJob(need)
                # In the pass's context: a replica whose share of this Host moves away makes
                # no further Docker call for it (``docker_client.fence_calls``).
                threading.Thread(target=contextvars.copy_context().run, daemon=True,
                                 args=(self._run, session, job, auth),
                                 name=f"pull-{need.host}").start()
            job.waiters[waiter] = wake
            return job

    def _run(self, session: HostSession, job: PullJob, auth: dict[str, str] | None) -> None:
        need = job.need
        try:
            engine = session.engine()
            if need.archive is not None:
                self._load(session, job)
            else:
                self._room(session, job, auth)
                engine.pull(need.image.pull, auth, job.note)
            del auth
            job.image_id, job.repo_digest = verify(session, need.image)
            job.state = "done"
            log.info("image.pulled", host=need.host, image=need.image.text,
                     digest=job.repo_digest, seconds=round(time.monotonic() - job.started, 1))
        except ControllerError as exc:
            job.error, job.state = exc, "failed"
        except Exception as exc:  # a bug: reported to the waiters, never a dead thread
            log.exception("image.pull.crashed", host=need.host, image=need.image.text)
            job.error = PullFailed(f"pulling {need.image.text} crashed: {type(exc).__name__}: "
                                   f"{exc} (a bug: please report it)")
            job.state = "failed"
        with self._lock:
            key = (need.host, need.image.pull)
            if job.state == "done":
                self._jobs.pop(key, None)
            else:
                job.unreported = set(job.waiters)
                log.warning("image.pull.failed", host=need.host, image=need.image.text,
                            error=str(job.error))
            waiters = dict(job.waiters)
        if job.state == "done":  # said once for each resource it was pulled for
            for waiter in waiters:
                self._said(waiter, f"{need.target} from {need.registry} "
                           f"({job.repo_digest or 'no digest'})")
        job.finished.set()
        for key_, wake in waiters.items():
            wake(key_)

    def _said(self, waiter: Key, message: str) -> None:
        try:
            self.services.store.events.append(waiter, "Normal", "Pulled", message)
        except Exception as exc:  # a full disk, a fenced replica: the pull still counts
            log.warning("image.pull.event_lost", resource=waiter, error=str(exc))

    def _load(self, session: HostSession, job: PullJob) -> None:
        """Stream the archive to the Host's engine, once the operator's policy (asked again
        here: a link planted since validation) and the Host's room allow it."""
        path = job.need.archive
        assert path is not None
        policy = enforced()
        if policy is not None and not policy.allowed("images", path):
            raise PullFailed(f"{path} is outside the folders images may be read from")
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            raise PullFailed(f"cannot read {path}: {exc.strerror or exc}") from None
        job.size_bytes = size
        self._check_room(session, job, size, f"{size / MB:.1f} MB (the archive)")
        job.state = "pulling"
        session.engine().load(path)

    def _check_room(self, session: HostSession, job: PullJob, size: int, what: str) -> None:
        root = session.engine().data_root()
        free = session.free_bytes(root)
        if free is not None and size * ROOM_MARGIN > free:
            raise PullFailed(f"Host {job.need.host}: not enough room to {job.need.verb} "
                             f"{job.need.image.text}: it is {what} and {root} has "
                             f"{free / MB:.1f} MB free; free space on the Host (or prune "
                             "images), then it is tried again")

    def _room(self, session: HostSession, job: PullJob, auth: dict[str, str] | None) -> None:
        """Refuse a pull the Host's disk cannot hold (the manifest's compressed size against
        the room under the data root). A size or room that cannot be read is logged and the
        pull goes ahead: the engine still fails a pull that runs out of room."""
        need = job.need
        login = (auth["username"], auth["password"]) if auth else None
        platform = session.facts.os if session.facts is not None else "linux/amd64"
        try:
            size = manifest_size(need.image.registry, need.image.repository,
                                 need.image.digest or need.image.tag or "latest", login,
                                 platform)
        except RegistryUnavailable as exc:
            log.info("image.size.unknown", host=need.host, image=need.image.text,
                     why=str(exc))
            return
        job.size_bytes = size.compressed_bytes
        self._check_room(session, job, size.compressed_bytes,
                         f"{size.compressed_bytes / MB:.1f} MB compressed (the registry's "
                         "manifest)")

    def tag_digest(self, session: HostSession, need: ImageNeed) -> str | None:
        """The digest the registry serves for a tag now, asked at most every TAG_CHECK_S per
        Host (a no-op pass must not cost a registry round trip); None when it cannot be told."""
        key = (need.host, need.image.pull)
        with self._lock:
            asked = self._tags.get(key)
        if asked is not None and time.monotonic() - asked[0] < TAG_CHECK_S:
            return asked[1] or None
        try:
            digest = session.engine().registry_digest(need.image.pull, auth_config(need))
        except ControllerError as exc:
            log.info("image.tag.unchecked", host=need.host, image=need.image.text, why=str(exc))
            digest = ""
        with self._lock:
            self._tags[key] = (time.monotonic(), digest)
        return digest or None


def verify(session: HostSession, image: ImageRef) -> tuple[str, str]:
    """The pulled image's ID and repo digest; PullFailed when a pinned digest is not the one
    the engine holds the image under."""
    found = session.engine().image(image.pull)
    if found is None:
        raise PullFailed(f"Host {session.name}: the pull of {image.text} ended but the engine "
                         "does not list the image")
    digests = [d for d in found.repo_digests if d.startswith(image.name + "@")]
    if image.digest is not None and found.id == image.digest:  # loaded: pinned by its ID
        return found.id, ""
    if image.digest is not None and image.digest_ref(image.digest) not in found.repo_digests:
        raise PullFailed(f"Host {session.name}: {image.text} was pulled but the engine holds "
                         f"it under {', '.join(digests) or 'no digest of ' + image.name}, not "
                         f"{image.digest}; refused")
    return found.id, (digests[0].partition("@")[2] if digests else "")


def bring(pulls: Pulls, session: HostSession, need: ImageNeed, waiter: Key, *, wake: Wake,
          wait: bool, timeout_s: float | None, stop: threading.Event | None,
          progress: Callable[[str], None]) -> None:
    """Return once ``need``'s image is on its Host. ``wait`` (a one-shot ``apply``): wait for
    the pull, printing its progress; else (the daemon) raise StillProgressing while it runs,
    and the board wakes ``waiter`` when it ends. A failed pull raises its PullFailed."""
    job = pulls.join(session, need, waiter, wake)
    if not job.finished.is_set() and wait:
        shown = [""]

        def look() -> bool | None:
            summary = job.summary()
            if summary != shown[0] and job.state != "checking":
                shown[0] = summary
                progress(summary)
            return True if job.finished.is_set() else None
        if until(look, timeout_s=timeout_s if timeout_s is not None else float("inf"),
                 pace=WAIT_PACE_S, stop=stop) is None:
            raise PullFailed(f"{job.summary()}: not done within the apply's timeout")
        job = pulls.join(session, need, waiter, wake) if job.state == "failed" else job
    if not job.finished.is_set():
        raise StillProgressing(job.summary(), RECHECK_S)
    if job.error is not None:
        raise job.error
