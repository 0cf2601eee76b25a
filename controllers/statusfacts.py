"""What each kind records about itself in ``ResourceStatus.facts``, as typed models.

A record's ``facts`` is kept on disk as a plain JSON object (camelCase keys, so ``status --json``
and files read the same as before), but nothing of ours reads or writes it as a dict: every kind
goes through its model here, so a misspelt key or a wrong type is a mypy error, not a silent
``None`` three releases later, and defaults live in one place.

Reading is forgiving on purpose. Facts are observations, never the only copy of something we
own (that is the inventory): a record written by an older version, or edited by hand, may hold a
key we no longer know or a value of the wrong type. :meth:`Facts.of` drops exactly the offending
keys and keeps the rest — a bad fact is an unknown fact, never a crash of the pass that reads it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from specs.facts import GpuInfo
from state.evidence import Verdict
from state.models import ResourceStatus


class Facts(BaseModel):
    """Base of every kind's facts: camelCase on disk, strict about unknown keys when written."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              validate_assignment=True, defer_build=True)  # built on first use

    KIND: ClassVar[str | None] = None  # the kind whose records these facts describe
    # The fact ``status NAME`` shows as a table (not a line), and its (row key, header) columns.
    TABLE: ClassVar[str | None] = None
    TABLE_COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def for_kind(cls, kind: str) -> type[Facts] | None:
        """The facts model of ``kind``'s records, if it has one."""
        todo: list[type[Facts]] = list(cls.__subclasses__())
        while todo:
            found = todo.pop()
            if kind == found.KIND:
                return found
            todo += found.__subclasses__()
        return None

    def table(self, now: datetime | None = None) -> list[dict[str, str]]:
        """The rows of the ``TABLE`` fact, shown by ``status NAME`` (none by default)."""
        return []

    @classmethod
    def parse(cls, raw: object) -> Self:
        """Validate ``raw``; keys that are unknown or of the wrong type are dropped, not fatal."""
        data = dict(raw) if isinstance(raw, dict) else {}
        for _ in range(len(data) + 1):
            try:
                return cls.model_validate(data)
            except ValidationError as exc:
                bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
                if not bad & set(data):
                    break
                for key in bad:
                    data.pop(key, None)
        return cls()

    @classmethod
    def of(cls, record: ResourceStatus | None) -> Self:
        """The facts of ``record`` (defaults for no record)."""
        return cls.parse(record.facts if record is not None else None)

    def merged(self, new: Self) -> Self:
        """These facts with those ``new`` sets (explicitly, even to None) taking their place:
        a step that learnt one thing about a source keeps what others learnt."""
        return self.model_copy(update={k: getattr(new, k) for k in new.model_fields_set})

    def put(self, record: ResourceStatus) -> None:
        """Store these facts in ``record`` (unset optional facts are left out of the file)."""
        record.facts = self.model_dump(mode="json", by_alias=True, exclude_none=True)


class HostStatusFacts(Facts):
    """A Host: how we reach it and what answered there."""

    KIND = "Host"

    docker: str = ""
    reachable: bool | None = None
    engine_version: str | None = None
    api_version: str | None = None
    os: str | None = None
    gpus: list[GpuInfo] | Literal["none"] | None = None
    gpu_probe: str | None = None


class RuntimeFacts(Facts):
    """What the model server said about itself in its logs (rule 11); absent = not said.

    Keys are snake_case on disk as the log parser names them
    (``controllers.deployment.runtime_facts``)."""

    model_config = ConfigDict(alias_generator=None)

    precision: str | None = None
    max_model_len: str | None = None
    kv_cache_dtype: str | None = None
    mode: str | None = None
    gpu_memory_utilization: str | None = None
    max_num_seqs: str | None = None
    max_num_batched_tokens: str | None = None
    enable_prefix_caching: str | None = None
    mm_processor_cache_gb: str | None = None
    preprocess_workers: str | None = None


class DeploymentStatusFacts(Facts):
    """A Deployment: where it runs, in which container, serving what, since when."""

    KIND = "Deployment"

    host: str | None = None
    docker_url: str | None = None
    container: str | None = None
    container_id: str | None = None
    image: str | None = None
    image_id: str | None = None
    url: str | None = None
    model: str | None = None
    runtime: RuntimeFacts | None = None
    ready_since: str | None = None


class SourceFacts(Facts):
    """One source of a StreamSet: where its frames come from, how it is registered, how it is."""

    origin: str | None = None
    camera: str | None = None
    sensor_id: str | None = None
    vst_url: str | None = None
    hash: str | None = None
    rtvi_url: str | None = None
    stream_id: str | None = None
    spec: dict[str, Any] | None = None
    registered: bool | None = None
    last_frame_at: str | None = None
    frame: str | None = None
    frames_fresh: bool | None = None
    error: str | None = None
    last_caption: str | None = None
    last_caption_at: str | None = None
    caption_chunks: int | None = None
    empty_chunks: int | None = None
    caption_latency_ms: float | None = None
    caption_error: str | None = None


class StreamSetStatusFacts(Facts):
    """A StreamSet: the Deployment and services it uses, and each source's facts by name."""

    KIND = "StreamSet"
    TABLE = "sources"
    TABLE_COLUMNS = (("source", "SOURCE"), ("registered", "REGISTERED"), ("frames", "FRAMES"),
                     ("frame", "SEEN"), ("caption", "LAST CAPTION"), ("error", "ERROR"))

    deployment: str | None = None
    rtvi: str | None = None
    vst: str | None = None
    host: str | None = None
    max_frame_age_seconds: float | None = None
    sources: dict[str, SourceFacts] = {}

    @classmethod
    def parse(cls, raw: object) -> Self:
        """As :meth:`Facts.parse`, but one bad source drops only that source's bad keys."""
        data = dict(raw) if isinstance(raw, dict) else {}
        sources = data.pop("sources", None)
        parsed = super().parse(data)
        if isinstance(sources, dict):
            parsed.sources = {str(name): SourceFacts.parse(fact)
                              for name, fact in sources.items()}
        return parsed

    def table(self, now: datetime | None = None) -> list[dict[str, str]]:
        """Per source: registered, frames fresh (a frame older than maxFrameAgeSeconds is
        stale, whatever the last pass concluded), what was seen, the last caption's age."""
        rows = []
        for name, fact in sorted(self.sources.items()):
            caption = fact.last_caption or ""
            fresh = fact.frames_fresh and _within(fact.last_frame_at,
                                                  self.max_frame_age_seconds, now)
            rows.append({
                "source": name,
                "registered": "yes" if fact.registered else "no",
                "frames": ("fresh" if fresh else "STALE") + _age(fact.last_frame_at, now),
                "frame": fact.frame or "",
                "caption": (_age(fact.last_caption_at, now).strip(" ()") or "-")
                + (f" {caption[:60]!r}" if caption else ""),
                "error": fact.error or fact.caption_error or "",
            })
        return rows


class SourceRecordFacts(Facts):
    """The spec source (``Source/specs``): which one, how many resources, what it refused."""

    KIND = "Source"

    source: str | None = None
    resources: int | None = None
    rejected_revision: str | None = None


class ExperimentStatusFacts(Facts):
    """An Experiment: the run it stands for, where it is, and (once terminal) its verdict.

    ``phase`` is Pending, Preflight, Running, Collecting, CleaningUp or Done; ``result`` is set
    only when Done (PASS, FAIL or INCONCLUSIVE) and never changes after. ``gates``: each gate's
    verdict and reason ("PASS: ..."), the detail being in the evidence folder."""

    KIND = "Experiment"

    run_id: str | None = None
    phase: str | None = None
    result: Verdict | None = None
    reason: str | None = None
    template: str | None = None
    host: str | None = None
    container: str | None = None
    url: str | None = None  # the run's service, as this process reaches it
    evidence: str | None = None  # the run's evidence folder
    started_at: str | None = None
    finished_at: str | None = None
    gates: dict[str, str] = {}


def _seconds_since(stamp: str | None, now: datetime | None) -> float | None:
    if not stamp:
        return None
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ((now or datetime.now(UTC)) - then).total_seconds()


def _age(stamp: str | None, now: datetime | None) -> str:
    seconds = _seconds_since(stamp, now)
    return "" if seconds is None else f" ({seconds:.0f}s ago)"


def _within(stamp: str | None, max_age: float | None, now: datetime | None) -> bool:
    seconds = _seconds_since(stamp, now)
    if seconds is None or max_age is None:
        return seconds is not None
    return seconds <= max_age
