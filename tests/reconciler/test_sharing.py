"""How replicas divide the shares (``reconciler.sharing``): the assignment every replica
computes alike, and claims, releases and exclusions against a real 3-member etcd cluster."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from controllers.kinds.experiments.board import RunBoard
from controllers.waiting import until
from reconciler.sharing import FLEET, NotHeld, Sharing, assign, replicas
from state.errors import StateError
from state.etcdgw import EtcdGateway
from state.etcdstore import EtcdStore
from state.keys import Key
from tests.etcd_cluster import EtcdCluster

HOSTS = {f"Host/h{i}" for i in range(7)} | {FLEET}


def test_every_replica_computes_the_same_even_assignment() -> None:
    members = ["a", "b", "c"]
    chosen = assign(HOSTS, members)
    assert chosen == assign(set(sorted(HOSTS)), list(reversed(members)))  # order-free
    loads = sorted(list(chosen.values()).count(m) for m in members)
    assert loads == [2, 3, 3]  # 8 shares, at most ceil(8/3) each
    without_c = assign(HOSTS, ["a", "b"])
    assert set(without_c) == HOSTS  # a leaver's shares all go to the others, evenly
    assert sorted(list(without_c.values()).count(m) for m in ("a", "b")) == [4, 4]
    assert assign(HOSTS, []) == {}


def _sharing(cluster: EtcdCluster, root: Path, name: str) -> Sharing:
    store = EtcdStore(root, EtcdGateway(cluster.endpoints), "t")
    return Sharing(store, name, 6, lambda key: f"Host/{key.name}", lambda: set(HOSTS),
                   lambda: None, lambda _said: None)


def test_replicas_split_the_shares_and_a_leavers_go_to_the_others(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    a, b = _sharing(etcd_cluster, tmp_path, "a"), _sharing(etcd_cluster, tmp_path, "b")
    try:
        for _ in range(2):  # a claims what is free; b's arrival makes a let go of b's part
            a.rebalance()
            b.rebalance()
        held_a, held_b = a.held(), b.held()
        assert held_a | held_b == HOSTS
        assert not held_a & held_b
        assert {len(held_a), len(held_b)} == {4}
        assert a.mine(Key("Host", next(iter(held_a)).removeprefix("Host/")))
        views = {v.name: v.shares for v in replicas(a.store)}
        assert set(views["a"]) == held_a
        with pytest.raises(StateError, match="replica name 'a' is in use"):
            _sharing(etcd_cluster, tmp_path, "a")
        with pytest.raises(StateError, match="use 1-63 letters"):
            _sharing(etcd_cluster, tmp_path, "x\nforged line")
        with pytest.raises(StateError, match=r"2 replica\(s\) share"):
            a.store.lock().acquire()  # an apply without --replica would act beside them
        b.close()
        a.rebalance()
        assert a.held() == HOSTS
    finally:
        a.close()
    # No replica left: one writer may take the namespace, and then no replica may join.
    with a.store.lock(), pytest.raises(StateError, match="without --replica holds"):
        _sharing(etcd_cluster, tmp_path, "c")


def test_a_run_started_by_a_pass_is_fenced_once_its_share_moves(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    a = _sharing(etcd_cluster, tmp_path, "a")
    board = RunBoard()
    moving = sorted(s for s, m in assign(HOSTS, ["a", "b"]).items()
                    if m == "b" and s.startswith("Host/"))[0]  # b's once it joins
    host = moving.removeprefix("Host/")
    started, go_on, said = threading.Event(), threading.Event(), []

    def work(_stop: threading.Event) -> str:
        a.fence(host)  # allowed: the share is held
        started.set()
        go_on.wait(30)
        try:
            a.fence(host)
        except NotHeld as exc:
            said.append(str(exc))
        return "done"

    b = None
    try:
        a.rebalance()
        assert moving in a.held()
        with a.acting(Key("Host", host)):  # the pass that starts the run on the board
            assert board.start("run-1", work)
        assert started.wait(30)
        b = _sharing(etcd_cluster, tmp_path, "b")
        a.rebalance()  # b present: a lets its share go
        assert moving not in a.held()
        go_on.set()
        until(lambda: said or None, timeout_s=30, pace=0.05)
        assert said == [f"replica a no longer holds {moving}: no Docker call on Host {host}"]
        a.fence(host)  # outside any pass or run: only the lease counts
    finally:
        go_on.set()
        board.close()
        a.close()
        if b is not None:
            b.close()



def test_a_replica_that_gains_a_share_back_reads_its_records_again(
        etcd_cluster: EtcdCluster, tmp_path: Path) -> None:
    """What a replica kept of a share's records was true while it held the share. Another
    holder may write them meanwhile, so gaining a share forgets what was kept."""
    moving = sorted(s for s, m in assign(HOSTS, ["ga", "gb"]).items()
                    if m == "gb" and s != FLEET)[0]
    key = Key.parse(moving)
    a = _sharing(etcd_cluster, tmp_path, "ga")
    try:
        a.rebalance()  # alone: it holds every share
        a.store.update(key, lambda st: st.facts.update(n=1))
        assert a.store.load(key) is not None  # kept
        b = _sharing(etcd_cluster, tmp_path, "gb")
        try:
            for _ in range(2):  # the share moves to b, which writes its record
                a.rebalance()
                b.rebalance()
            assert b.mine(key)
            assert not a.mine(key)
            b.store.update(key, lambda st: st.facts.update(n=2))
        finally:
            b.close()
        a.rebalance()  # back with a
        assert a.mine(key)
        record = a.store.load(key)
        assert record is not None
        assert record.facts["n"] == 2  # not the 1 it kept before the share went away
    finally:
        a.close()
