"""The ``Source/specs`` record: which revision is in force, and which was refused and why.

``reconciler status`` shows it beside the resources, so a refused push is seen where people
look. It holds only facts about the source, nothing we own: a corrupt one is moved aside
(``quarantine``) and started afresh rather than killing the thread that watches the source.
"""

from __future__ import annotations

from collections.abc import Callable

from controllers.facts import Facts
from reconciler.sources.base import Snapshot, SourceError
from state.errors import CorruptState
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store

SOURCE_RESOURCE = Key("Source", "specs")


class SourceRecordFacts(Facts):
    """The spec source (``Source/specs``): which one, how many resources, what it refused."""

    source: str | None = None
    resources: int | None = None
    rejected_revision: str | None = None


class SourceRecord:
    def __init__(self, store: Store, source_name: str,
                 quarantine: Callable[[Key, CorruptState], None],
                 mine: Callable[[Key], bool] = lambda _key: True) -> None:
        self.store = store
        self.source_name = source_name
        self._quarantine = quarantine
        self._mine = mine  # among replicas, the record is the Host-less share's holder's

    def loaded(self, snapshot: Snapshot, old_revision: str | None) -> None:
        """``snapshot`` is in force (an event when it is a new revision)."""
        if not self._mine(SOURCE_RESOURCE):
            return

        def mutate(st: ResourceStatus) -> None:
            st.applied_revision = snapshot.revision
            known = SourceRecordFacts.of(st)
            known.source, known.resources = self.source_name, len(snapshot.spec_set.resources)
            known.put(st)
            st.set_condition("Ready", "True", "Loaded", f"revision {snapshot.revision}")
            st.set_condition("Stalled", "False", "Loaded", "")
        self._update(mutate)
        if snapshot.revision != old_revision:
            self.store.events.append(SOURCE_RESOURCE, "Normal", "Revision",
                                     f"loaded revision {snapshot.revision} "
                                     f"({len(snapshot.spec_set.resources)} resources)")

    def refused(self, exc: SourceError, keep: str) -> None:
        """A revision was refused and ``keep`` stays in force: Stalled, with one event per
        new refusal (the same one again adds nothing to the log)."""
        if not self._mine(SOURCE_RESOURCE):
            return
        message = str(exc)
        reason = exc.reason_code

        def mutate(st: ResourceStatus) -> None:
            known = SourceRecordFacts.of(st)
            known.source, known.rejected_revision = self.source_name, exc.revision
            known.put(st)
            st.set_condition("Stalled", "True", reason, f"keeping revision {keep}: {message}")
            st.set_condition("Ready", "False", reason, message)
        before = self._update(None)
        stalled = before is not None and (c := before.condition("Stalled")) is not None and (
            c.status == "True" and c.message.endswith(message))
        self._update(mutate)
        if not stalled:
            self.store.events.append(SOURCE_RESOURCE, "Warning", reason,
                                     f"revision {exc.revision or '?'} refused, keeping {keep}: "
                                     f"{message}")

    def _update(self, mutate: Callable[[ResourceStatus], None] | None
                ) -> ResourceStatus | None:
        """Read (``mutate`` None) or update the record; a corrupt one is moved aside first."""
        try:
            if mutate is None:
                return self.store.load(SOURCE_RESOURCE)
            return self.store.update(SOURCE_RESOURCE, mutate)
        except CorruptState as exc:
            self._quarantine(SOURCE_RESOURCE, exc)
            if mutate is None:
                return None
            return self.store.update(SOURCE_RESOURCE, mutate)
