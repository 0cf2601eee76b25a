"""A writer's records kept between its passes (``state.etcdcache``), on a real 3-member etcd
cluster: a lock holder reads each record once, a resync reads ahead in one request per 128
records, and a record whose writer may have changed hands is read from the cluster again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from state.errors import CorruptState
from state.etcdcache import RecordCache, Seen
from state.etcdgw import EtcdGateway, KeyValue
from state.etcdstore import EtcdStore
from state.keys import Key
from state.models import ResourceStatus
from tests.etcd_cluster import EtcdCluster

HOST = Key("Host", "h")


def _store(cluster: EtcdCluster, root: Path, namespace: str) -> EtcdStore:
    return EtcdStore(root, EtcdGateway(cluster.endpoints), namespace)


def _requests(store: EtcdStore) -> int:
    return sum(store.gateway.calls.values())


def _n(store: EtcdStore, key: Key) -> int | None:
    """The record's number, or None when there is no record."""
    record = store.load(key)
    return None if record is None else int(record.facts["n"])


def _set(n: int) -> Callable[[ResourceStatus], None]:
    def mutate(status: ResourceStatus) -> None:
        status.facts["n"] = n
    return mutate


def test_a_lock_holder_reads_its_records_once_and_sees_its_own_writes(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    store = _store(etcd_cluster, tmp_path / "a", "cache-lock")
    with store.lock():
        store.update(HOST, _set(1))
        before = _requests(store)
        for _ in range(3):  # a pass's plan, act and status reads
            assert _n(store, HOST) == 1
        assert _requests(store) == before  # no round trip: what it wrote is the record
        store.update(HOST, _set(2))
        after_write = _requests(store)
        assert after_write == before + 1  # the compare-and-swap alone, no read before it
        assert _n(store, HOST) == 2
        assert store.delete(HOST)
        assert store.load(HOST) is None
        assert store.cache.hits >= 5
    # Released: another writer may write now, and this store reads what it wrote.
    other = _store(etcd_cluster, tmp_path / "b", "cache-lock")
    other.update(HOST, _set(3))
    assert _n(store, HOST) == 3


def test_without_the_lock_every_read_asks_the_cluster(etcd_cluster: EtcdCluster,
                                                      tmp_path: Path) -> None:
    reader = _store(etcd_cluster, tmp_path / "a", "cache-none")  # `status`: no lock
    writer = _store(etcd_cluster, tmp_path / "b", "cache-none")
    writer.update(HOST, _set(1))
    first = _n(reader, HOST)
    writer.update(HOST, _set(2))
    assert (first, _n(reader, HOST)) == (1, 2)
    assert reader.cache.hits == 0


def test_a_resync_reads_its_records_ahead_in_one_request_per_128(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    writer = _store(etcd_cluster, tmp_path / "w", "cache-ahead")
    keys = [Key("Deployment", f"d{i}") for i in range(200)]
    for i, key in enumerate(keys):
        writer.update(key, _set(i))
    store = _store(etcd_cluster, tmp_path / "a", "cache-ahead")
    absent = Key("Deployment", "never-written")
    with store.lock():
        before = _requests(store)
        store.prefetch([*keys, absent])
        assert _requests(store) - before == 2  # 201 records: 128 + 73
        assert [_n(store, k) for k in keys] == list(range(200))
        assert store.load(absent) is None
        store.prefetch(keys)  # all known: nothing asked again
        assert _requests(store) - before == 2


def test_a_replica_believes_the_shares_it_holds_and_reads_again_after_gaining_one(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    held = {HOST}
    store = _store(etcd_cluster, tmp_path / "a", "cache-shares")
    store.cache.believe(lambda resource: Key.parse(resource) in held)
    other = _store(etcd_cluster, tmp_path / "b", "cache-shares")  # the previous holder
    theirs = Key("Host", "theirs")
    store.update(HOST, _set(1))
    other.update(theirs, _set(1))
    assert store.load(theirs) is not None
    other.update(theirs, _set(2))  # not held: never believed, read each time
    assert _n(store, theirs) == 2
    # The share moves away, its new holder writes, and it comes back: forget() on the gain.
    held.clear()
    other.update(HOST, _set(5))
    held.add(HOST)
    store.cache.forget()
    assert _n(store, HOST) == 5


def _kv(value: bytes, revision: int) -> KeyValue:
    return KeyValue("k", value, revision, revision)


def test_a_read_begun_before_a_forget_or_older_than_a_write_is_not_kept() -> None:
    cache = RecordCache()
    cache.believe(lambda _resource: True)
    epoch = cache.epoch
    cache.forget()  # a share gained while the read was in flight
    cache.saw("Host/h", "k", Seen(_kv(b"old", 5), 5), epoch)
    assert cache.lookup("Host/h", "k") is None
    cache.saw("Host/h", "k", Seen(_kv(b"written", 9), 9), cache.epoch)
    cache.saw("Host/h", "k", Seen(_kv(b"read", 7), 7), cache.epoch)  # raced the write
    seen = cache.lookup("Host/h", "k")
    assert seen is not None
    assert seen.kv == _kv(b"written", 9)
    cache.believe(None)  # the lock is gone: nothing believed
    assert cache.lookup("Host/h", "k") is None


def test_a_record_read_while_asking_whose_it_is_is_not_believed(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    """A replica finds a pruned resource's share from its record: that read, made by the
    question itself, is read from the cluster instead of asking again without end."""
    store = _store(etcd_cluster, tmp_path / "a", "cache-asking")
    store.update(HOST, _set(1))
    store.cache.believe(lambda resource: store.load(Key.parse(resource)) is not None)
    assert _n(store, HOST) == 1
    assert _n(store, HOST) == 1
    assert store.cache.hits == 1  # the second read, believed; the question's reads are not


def test_a_corrupt_record_moved_aside_is_not_kept_whatever_its_name(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    store = _store(etcd_cluster, tmp_path / "a", "cache-quarantine")
    bad = f"{store.prefix}resources/Deployment/bad.json"
    odd = f"{store.prefix}resources/Deployment/Not A Name.json"  # no resource has this name
    with store.lock():
        store.gateway.put(bad, b"{not json")
        store.gateway.put(odd, b"{not json")
        with pytest.raises(CorruptState):
            store.load(Key("Deployment", "bad"))  # read, and kept as it is
        assert store.quarantine(Path(bad)) is not None
        assert store.quarantine(Path(odd)) is not None
        assert store.load(Key("Deployment", "bad")) is None  # its absence, not the bytes
