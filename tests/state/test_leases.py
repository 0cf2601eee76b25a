"""Shares held through etcd leases, and the fence on every write (issue 28), against a real
3-member cluster: one holder per share; a replica that stops renewing (as under SIGSTOP) loses
its shares within the TTL, another takes them, and the woken one's writes are refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controllers.waiting import until
from state.errors import StateFenced
from state.etcdgw import Compare, EtcdGateway, Put
from state.leases import Replica
from tests.etcd_cluster import EtcdCluster

PREFIX = "/rtvi-reconciler/test/"


@pytest.fixture
def gateway(etcd_cluster: EtcdCluster) -> Iterator[EtcdGateway]:
    client = EtcdGateway(etcd_cluster.endpoints, timeout_s=1.0)
    yield client
    client.close()


def test_one_replica_holds_a_share_and_its_guarded_writes_land(gateway: EtcdGateway) -> None:
    one, two = Replica(gateway, PREFIX, "one", 5), Replica(gateway, PREFIX, "two", 5)
    try:
        assert one.claim("Host/edge")
        assert one.claim("Host/edge")  # again: still ours
        assert not two.claim("Host/edge")
        assert two.claim("Host/local")
        assert {(h.share, h.replica) for h in one.holders()} == {("Host/edge", "one"),
                                                                 ("Host/local", "two")}
        key = PREFIX + "resources/Deployment/a"
        assert one.guarded("Host/edge", [Compare.absent(key)], [Put(key, b"{}")]).succeeded
        with pytest.raises(StateFenced, match="replica two no longer holds Host/edge "
                                              r"\(held by one\): nothing was written"):
            two.guarded("Host/edge", [], [Put(key, b"forged")])
        got = gateway.get(key)
        assert got is not None
        assert got.value == b"{}"
        one.release("Host/edge")
        assert two.claim("Host/edge")  # a released share is free at once
    finally:
        one.close()
        two.close()
    assert gateway.scan(PREFIX + "holders/") == []  # a clean close lets every share go


def test_a_replica_that_stops_renewing_loses_its_shares_and_writes_nothing_after(
        gateway: EtcdGateway) -> None:
    paused = Replica(gateway, PREFIX, "paused", 1)
    other = Replica(gateway, PREFIX, "other", 5)
    try:
        assert paused.claim("Host/edge")
        paused.close(revoke=False)  # its renewals stop, as under SIGSTOP; its lease runs on
        assert until(lambda: True if other.claim("Host/edge") else None, timeout_s=10,
                     pace=0.1), "the share was never free again"
        assert paused.lost  # past its TTL with no renewal: it knows it must not act
        key = PREFIX + "resources/Deployment/a"
        with pytest.raises(StateFenced, match="lost its lease"):
            paused.guarded("Host/edge", [], [Put(key, b"stale")])
        # Even a replica that has not noticed yet is refused by etcd itself: the fence.
        paused._renewed_at = 10 ** 12  # its clock says all is well
        paused._lost.clear()
        with pytest.raises(StateFenced, match=r"held by other"):
            paused.guarded("Host/edge", [], [Put(key, b"stale")])
        assert gateway.get(key) is None
    finally:
        other.close()
