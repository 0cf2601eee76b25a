"""The store's records in a real 3-member etcd cluster on loopback (``state.etcdstore``): the
file store's guarantees (no lost update, history kept across delete, one instance record,
one writer, events in order, a broken record named and moved aside), by etcd's means."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from state import CorruptState, ResourceStatus, StateError
from state.errors import LockHeld
from state.etcdgw import EtcdGateway, EtcdUnavailable
from state.etcdstore import EtcdStore, parse_url
from state.keys import Key
from state.models import HistoryEntry, utc_now
from tests.e2e.daemon_helpers import wait_for
from tests.etcd_cluster import EtcdCluster

THREADS = 4
INCREMENTS = 10


def _store(cluster: EtcdCluster, root: Path, namespace: str = "test") -> EtcdStore:
    return EtcdStore(root, EtcdGateway(cluster.endpoints), namespace)


def _url(cluster: EtcdCluster, namespace: str = "test") -> str:
    return "etcd://" + ",".join(e.removeprefix("http://") for e in cluster.endpoints) + (
        f"/{namespace}")


def test_the_state_url_names_endpoints_and_a_namespace_or_says_what_is_wrong() -> None:
    assert parse_url("etcd://127.0.0.1:2379,[::1]:2380/fleet-a") == (
        ["http://127.0.0.1:2379", "http://[::1]:2380"], "fleet-a")
    assert parse_url("etcd://localhost:2379") == (["http://localhost:2379"], "default")
    for bad, said in [("files2", "expected files"), ("etcd://h", "not HOST:PORT"),
                      ("etcd://h:99999", "not HOST:PORT"), ("etcd://u@h:1", "not HOST:PORT"),
                      ("etcd://h:1/Bad_NS", "namespace"), ("etcd://h:1/a/b", "namespace")]:
        with pytest.raises(StateError, match=said):
            parse_url(bad)


def test_records_history_and_instance_live_in_the_cluster(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    store = _store(etcd_cluster, tmp_path / "a")
    entry = HistoryEntry(time=utc_now(), action="create", target="container x", cause="new",
                         result="ok")
    store.update(Key("Deployment", "vlm"), lambda st: st.add_history(entry))
    store.update(Key("Host", "local"), lambda st: st.facts.update(docker="20.10"))
    # Another machine: its own local directory, the same cluster and namespace.
    other = _store(etcd_cluster, tmp_path / "b")
    assert [s.resource for s in other.list()] == ["Deployment/vlm", "Host/local"]
    assert other.list("Host")[0].facts == {"docker": "20.10"}
    assert other.written_at(Key("Host", "local")) > 0
    assert _store(etcd_cluster, tmp_path / "c", "elsewhere").list() == []  # namespaces apart
    assert other.delete(Key("Deployment", "vlm"), cause="removed from the specs")
    assert store.load(Key("Deployment", "vlm")) is None
    assert [e.action for e in store.archived_history("Deployment/vlm")] == ["create", "delete"]
    again = store.update(Key("Deployment", "vlm"), lambda st: None)
    assert again is not None
    assert [e.action for e in again.history] == ["create", "delete"]
    assert store.archived_history("Deployment/vlm") == []  # moved back in the same write
    assert store.update(Key("Deployment", "gone"), lambda st: None, create=False) is None
    owner = store.instance("fleet")
    assert other.instance(None) == owner
    assert other.instance("fleet") == owner
    with pytest.raises(StateError, match="belongs to instance 'fleet', not 'other'"):
        other.instance("other")
    assert not (tmp_path / "a" / "resources").exists()  # nothing of it on the local disk


def test_writers_on_two_machines_lose_no_update(etcd_cluster: EtcdCluster,
                                                tmp_path: Path) -> None:
    stores = [_store(etcd_cluster, tmp_path / str(n)) for n in range(2)]
    errors: list[BaseException] = []

    def bump(status: ResourceStatus) -> None:
        status.facts["n"] = status.facts.get("n", 0) + 1

    def worker(store: EtcdStore) -> None:
        try:
            for _ in range(INCREMENTS):
                store.update(Key("Deployment", "d"), bump)
                store.events.append("Deployment/d", "Normal", "Bumped", "one more")
        except BaseException as exc:  # reported below; a thread can't fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(stores[n % 2],)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = stores[0].load(Key("Deployment", "d"))
    assert final is not None
    assert final.facts["n"] == THREADS * INCREMENTS
    seqs = [e.seq for e in stores[1].events.read()]
    assert seqs == list(range(1, THREADS * INCREMENTS + 1))  # each number once, in order
    assert [e.seq for e in stores[0].events.read(since_seq=35)] == [36, 37, 38, 39, 40]
    assert len(stores[0].events.read(resource="Deployment/d", limit=3)) == 3
    follow = stores[1].events.follow(since_seq=39, poll_s=0.05)
    assert next(follow).seq == 40
    stores[0].events.append("Host/h", "Warning", "Late", "appended while followed")
    assert next(follow).reason == "Late"
    follow.close()


def test_a_broken_record_is_named_by_its_key_and_moved_aside(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    store = _store(etcd_cluster, tmp_path)
    store.update(Key("Host", "good"), lambda st: None)
    key = f"{store.prefix}resources/Deployment/bad.json"
    store.gateway.put(key, b"{not json")
    store.gateway.put(f"{store.prefix}resources/Deployment/other.json",
                      json.dumps({"resource": "Host/x", "kind": "Host", "name": "x"}).encode())
    store.gateway.put(f"{store.prefix}resources/Deployment/Not A Name.json", b"{}")
    found, broken = store.scan()
    assert [s.resource for s in found] == ["Host/good"]
    # Names alone (a replica's rebalance): the broken records still stand for their resources.
    assert store.keys() == [Key("Deployment", "bad"), Key("Deployment", "other"),
                            Key("Host", "good")]
    broken = [b for b in broken if "Not A Name" not in str(b.path)]
    assert sorted(str(b.path) for b in broken) == [key, key.replace("bad", "other")]
    assert "holds resource 'Host/x'" in str(broken[-1])
    with pytest.raises(CorruptState, match=r"resources/Deployment/bad\.json"):
        store.load(Key("Deployment", "bad"))
    moved = store.quarantine(Path(key))
    assert moved is not None
    kept = store.gateway.get(str(moved))
    assert kept is not None
    assert kept.value == b"{not json"
    assert store.load(Key("Deployment", "bad")) is None
    assert store.quarantine(Path("/elsewhere/resources/Deployment/x.json")) is None


def test_one_writer_per_namespace_and_a_dead_holder_here_is_not_waited_for(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    store = _store(etcd_cluster, tmp_path)
    with store.lock() as lock:
        assert lock.held
        with pytest.raises(LockHeld, match="pid"):
            _store(etcd_cluster, tmp_path / "b").lock().acquire()
    with _store(etcd_cluster, tmp_path / "b").lock():  # released: another takes it
        pass
    # A process of this machine takes the lock and is killed (-9): its lease lives on for
    # its TTL, but a restart here sees its PID gone and takes the lock at once.
    code = (f"import os, sys; sys.path.insert(0, {str(Path.cwd())!r});"
            "from pathlib import Path; from state.etcdgw import EtcdGateway;"
            "from state.etcdstore import EtcdStore;"
            f"s = EtcdStore(Path({str(tmp_path / 'c')!r}), EtcdGateway({etcd_cluster.endpoints!r}),"
            "'test'); s.lock().acquire(); os.kill(os.getpid(), 9)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == -9
    with store.lock() as lock:
        assert lock.held


def test_an_unreachable_cluster_is_a_state_error_naming_each_member(tmp_path: Path) -> None:
    store = EtcdStore(tmp_path, EtcdGateway(["http://127.0.0.1:9", "http://127.0.0.1:7"],
                                            timeout_s=1), "test")
    with pytest.raises(EtcdUnavailable, match=r"127\.0\.0\.1:9.*127\.0\.0\.1:7"):
        store.check_layout()
    with pytest.raises(StateError):
        store.update(Key("Host", "h"), lambda st: None)


def test_a_finished_runs_evidence_is_kept_for_every_machine_and_checked_when_read(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    here = _store(etcd_cluster, tmp_path / "here")
    folder = tmp_path / "evidence" / "run-1"
    (folder / "gates").mkdir(parents=True)
    (folder / "gates" / "cleanup.json").write_text('{"passed": true}')
    (folder / "big.log").write_bytes(os.urandom(2 * 1024 * 1024))  # several chunks
    (folder / "link").symlink_to("/etc/passwd")  # left out: never followed, never kept
    assert here.keep_bundle("run-1", folder)
    assert not here.keep_bundle("run-1", folder)  # once
    assert not here.keep_bundle("run-2", tmp_path / "nothing")
    there = _store(etcd_cluster, tmp_path / "there")
    copy = there.bundle("run-1", tmp_path / "there" / "copies")
    assert copy is not None
    assert (copy / "big.log").read_bytes() == (folder / "big.log").read_bytes()
    assert (copy / "gates" / "cleanup.json").read_text() == '{"passed": true}'
    assert not (copy / "link").is_symlink()
    assert there.bundle("run-9", tmp_path / "copies") is None
    (tmp_path / "kept").mkdir()
    with pytest.raises(StateError, match="not a run ID"):  # never a path out of the cache
        there.bundle("../kept", tmp_path / "copies")
    assert (tmp_path / "kept").is_dir()
    chunk = f"{here.prefix}bundles/run-1/000001"
    here.gateway.put(chunk, b"tampered")
    with pytest.raises(StateError, match="damaged"):
        there.bundle("run-1", tmp_path / "again")
    assert not (tmp_path / "again" / "run-1").exists()  # nothing unpacked


def test_a_follower_is_woken_by_the_watch_not_by_its_poll(etcd_cluster: EtcdCluster,
                                                          tmp_path: Path) -> None:
    """``events -f`` on etcd: an event appended by another machine reaches a follower whose
    periodic read is an hour away; only etcd's watch can have woken it."""
    follower, writer = _store(etcd_cluster, tmp_path / "f"), _store(etcd_cluster, tmp_path / "w")
    writer.events.append("Deployment/vlm", "Normal", "Created", "first")
    got: list[str] = []
    stream = follower.events.follow(poll_s=3600)

    def take_two() -> None:
        for _ in range(2):
            got.append(next(stream).message)

    reader = threading.Thread(target=take_two, daemon=True)
    reader.start()
    wait_for("the event already there", lambda: got or None, 30, 0.05)
    writer.events.append("Deployment/vlm", "Normal", "Updated", "second")
    reader.join(timeout=30)
    assert got == ["first", "second"]
