"""Store behaviour on a real filesystem: layout, listing, deletion, corruption, instance name,
path-traversal refusal and lost-update freedom under threads."""

from __future__ import annotations

import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from state import CorruptState, ResourceStatus, StateError, Store
from state.keys import Key

THREADS = 8
INCREMENTS = 25


def _status(resource: str) -> ResourceStatus:
    kind, name = resource.split("/")
    return ResourceStatus(resource=resource, kind=kind, name=name)


def test_root_is_created_lazily_and_private(tmp_path: Path) -> None:
    root = tmp_path / "a" / "state"
    store = Store(root)
    assert store.load(Key("Host", "h")) is None
    assert store.list() == []
    assert not root.exists()
    store.save(_status("Host/h"))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert (root / "resources" / "Host" / "h.json").is_file()


def test_save_load_list_delete(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    for resource in ["StreamSet/s1", "Deployment/b", "Deployment/a", "Host/h"]:
        status = _status(resource)
        status.facts["who"] = resource
        status.set_condition("Ready", "True", "Up")
        store.save(status)
        assert status.updated_at != ""
    loaded = store.load(Key("Deployment", "a"))
    assert loaded is not None
    assert loaded.facts == {"who": "Deployment/a"}
    assert loaded.condition("Ready") is not None
    assert [s.resource for s in store.list()] == [
        "Deployment/a",
        "Deployment/b",
        "Host/h",
        "StreamSet/s1",
    ]
    assert [s.resource for s in store.list("Deployment")] == ["Deployment/a", "Deployment/b"]
    assert store.list("Experiment") == []
    assert store.delete(Key("Deployment", "a")) is True
    assert store.delete(Key("Deployment", "a")) is False
    assert store.load(Key("Deployment", "a")) is None
    assert [s.name for s in store.list("Deployment")] == ["b"]


def test_update_creates_then_modifies(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    first = store.update(Key("Host", "h"), lambda s: s.facts.update(n=1))
    assert first is not None
    assert first.facts == {"n": 1}
    store.update(Key("Host", "h"), lambda s: s.facts.update(n=s.facts["n"] + 1))
    again = Store(tmp_path / "state").load(Key("Host", "h"))
    assert again is not None
    assert again.facts == {"n": 2}
    with pytest.raises(StateError, match="refusing it as a file name"):
        store.update("Host/../h", lambda s: None)  # type: ignore[arg-type]  # on purpose


def test_update_that_raises_saves_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")

    def boom(status: ResourceStatus) -> None:
        status.facts["x"] = 1
        raise RuntimeError("controller bug")

    with pytest.raises(RuntimeError):
        store.update(Key("Host", "h"), boom)
    assert store.load(Key("Host", "h")) is None


def test_corrupt_file_is_named(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    store.save(_status("Host/h"))
    path = tmp_path / "state" / "resources" / "Host" / "h.json"
    path.write_text("{not json")
    with pytest.raises(CorruptState) as err:
        store.load(Key("Host", "h"))
    assert str(path) in str(err.value)
    with pytest.raises(CorruptState):
        store.list()
    store.save(_status("Deployment/d"))
    (path.parent / "not a name.json").write_text("{}")
    (path.parent / "notes.txt").write_text("x")
    assert store.keys() == [Key("Deployment", "d"), Key("Host", "h")]  # the corrupt one too


def test_leftover_temp_file_is_ignored(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    store.save(_status("Host/h"))
    leftover = tmp_path / "state" / "resources" / "Host" / ".tmp-x.json"
    leftover.write_text("{torn")
    assert [s.resource for s in store.list()] == ["Host/h"]


@pytest.mark.parametrize(
    "resource",
    [
        "Deployment/../../etc/passwd",
        "Deployment/..",
        "Deployment/a/b",
        "Deployment/.hidden",
        "Deployment/",
        "../Deployment/x",
        "/etc/x",
        "noslash",
        "Deployment/a\x00b",
        "Deploy..ment/x",
    ],
)
def test_path_traversal_is_refused(tmp_path: Path, resource: str) -> None:
    root = tmp_path / "state"
    store = Store(root)
    with pytest.raises(StateError):
        store.load(resource)  # type: ignore[arg-type]  # raw text from outside, on purpose
    with pytest.raises(StateError):
        store.delete(resource)  # type: ignore[arg-type]
    with pytest.raises(StateError):
        store.save(ResourceStatus(resource=resource, kind="Deployment", name="x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_save_refuses_inconsistent_identity(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    with pytest.raises(StateError):
        store.save(ResourceStatus(resource="Host/a", kind="Host", name="b"))


def test_instance_persists_and_mismatch_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "state"
    assert Store(root).instance(None) == "default"
    assert Store(root).instance(None) == "default"
    assert Store(root).instance("default") == "default"
    with pytest.raises(StateError) as err:
        Store(root).instance("lab-2")
    assert "belongs to instance 'default', not 'lab-2'" in str(err.value)

    other = tmp_path / "other"
    assert Store(other).instance("lab-2") == "lab-2"
    assert Store(other).instance(None) == "lab-2"
    with pytest.raises(StateError):
        Store(other).instance("default")


@pytest.mark.parametrize("bad", ["", "UPPER", "-lead", "trail-", "a_b", "x" * 33, "a/b"])
def test_invalid_instance_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(StateError):
        Store(tmp_path / "state").instance(bad)
    assert not (tmp_path / "state" / "instance.json").exists()


def test_corrupt_instance_file_is_named(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    (root / "instance.json").write_text('{"instance": "Not Valid"}')
    with pytest.raises(CorruptState, match=r"instance\.json"):
        Store(root).instance(None)


def test_concurrent_updates_lose_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def bump(status: ResourceStatus) -> None:
        status.facts["n"] = status.facts.get("n", 0) + 1

    def worker() -> None:
        try:
            barrier.wait()
            for _ in range(INCREMENTS):
                store.update(Key("Deployment", "d"), bump)
        except BaseException as exc:  # reported below; a thread can't fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = Store(tmp_path / "state").load(Key("Deployment", "d"))
    assert final is not None
    assert final.facts["n"] == THREADS * INCREMENTS


def test_an_update_of_one_resource_does_not_wait_for_another(tmp_path: Path) -> None:
    """The lock is per resource: while one record's update is in progress (its mutate blocks),
    another record updates, and the same record waits its turn."""
    store = Store(tmp_path / "state")
    inside, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow(status: ResourceStatus) -> None:
        inside.set()
        assert release.wait(30)
        order.append("slow")
        status.facts["slow"] = True

    def update(name: str, mutate: Callable[[ResourceStatus], None]) -> threading.Thread:
        thread = threading.Thread(target=store.update, args=(Key("StreamSet", name), mutate),
                                  daemon=True)
        thread.start()
        return thread

    holder = update("a", slow)
    try:
        assert inside.wait(30)
        other = update("b", lambda st: st.facts.update(other=True))
        other.join(30)
        assert not other.is_alive(), "b's update waited for a's"
        same = update("a", lambda st: order.append("same"))
        same.join(0.2)  # it cannot get in while a's update holds the record
        assert same.is_alive()
        assert order == []
    finally:
        release.set()
    holder.join(30)
    same.join(30)
    assert order == ["slow", "same"]
    a, b = store.load(Key("StreamSet", "a")), store.load(Key("StreamSet", "b"))
    assert a is not None
    assert a.facts["slow"] is True
    assert b is not None
    assert b.facts["other"] is True


def test_history_survives_delete_and_recreate(tmp_path: Path) -> None:
    from state.models import HistoryEntry, utc_now

    store = Store(tmp_path / "state")
    entry = HistoryEntry(time=utc_now(), action="create", target="container x", cause="new",
                         result="ok")
    store.update(Key("Deployment", "vlm"), lambda st: st.add_history(entry))
    assert store.delete(Key("Deployment", "vlm"), cause="removed from the specs")
    assert store.load(Key("Deployment", "vlm")) is None
    archived = store.archived_history("Deployment/vlm")
    assert [e.action for e in archived] == ["create", "delete"]
    assert archived[-1].cause == "removed from the specs"

    again = store.update(Key("Deployment", "vlm"), lambda st: None)
    assert again is not None
    assert [e.action for e in again.history] == ["create", "delete"]
    assert store.archived_history("Deployment/vlm") == []  # moved back, not kept twice
    # A second delete/recreate cycle keeps the whole story, in order.
    store.delete(Key("Deployment", "vlm"))
    third = store.update(Key("Deployment", "vlm"), lambda st: None)
    assert third is not None
    assert [e.action for e in third.history] == ["create", "delete", "delete"]


def test_a_damaged_history_archive_does_not_block_recreating(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    store.update(Key("Deployment", "vlm"), lambda st: None)
    store.delete(Key("Deployment", "vlm"))
    (tmp_path / "state" / "history" / "Deployment" / "vlm.json").write_text("{not json")
    record = store.update(Key("Deployment", "vlm"), lambda st: None)
    assert record is not None
    assert record.history == []
    assert any(e.reason == "HistoryUnreadable" for e in store.events.read())


def test_an_update_the_known_record_already_says_reads_and_writes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.update(Key("Deployment", "vlm"),
                 lambda st: st.set_condition("Ready", "True", "Serving", ""))
    known = store.load(Key("Deployment", "vlm"))
    path = tmp_path / "resources" / "Deployment" / "vlm.json"
    path.write_text("not JSON")  # were it read, this would raise CorruptState

    def ready(st: ResourceStatus) -> None:
        st.set_condition("Ready", "True", "Serving", "")
    assert store.update_unless_known(Key("Deployment", "vlm"), ready, known) is False
    assert path.read_text() == "not JSON"


def test_an_update_the_known_record_lacks_is_made_on_the_record_as_it_is_now(
        tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.update(Key("Deployment", "vlm"),
                 lambda st: st.set_condition("Ready", "True", "Serving", ""))
    known = store.load(Key("Deployment", "vlm"))
    # Another writer adds a fact after the pass read its copy: the update must keep it.
    store.update(Key("Deployment", "vlm"), lambda st: st.facts.update(seen=1))

    def degraded(st: ResourceStatus) -> None:
        st.set_condition("Degraded", "True", "Slow", "p95 over the limit")
    assert store.update_unless_known(Key("Deployment", "vlm"), degraded,
                                     known) is True
    record = store.load(Key("Deployment", "vlm"))
    assert record is not None
    assert record.facts == {"seen": 1}
    cond = record.condition("Degraded")
    assert cond is not None
    assert cond.reason == "Slow"
    # Without a known record it is a plain update.
    assert store.update_unless_known(Key("Deployment", "vlm"), degraded,
                                     None) is True


def test_written_at_is_the_records_own_save_never_a_namesakes(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    key, namesake = Key("Experiment", "canary"), Key("Experiment", "canary-2")
    assert store.written_at(key) == 0.0  # never saved
    store.save(ResourceStatus(resource=str(namesake), kind="Experiment", name="canary-2"))
    assert store.written_at(key) == 0.0  # a name that begins alike is another record
    store.save(ResourceStatus(resource=str(key), kind="Experiment", name="canary"))
    path = tmp_path / "state" / "resources" / "Experiment" / "canary.json"
    assert store.written_at(key) == path.stat().st_mtime > 0
