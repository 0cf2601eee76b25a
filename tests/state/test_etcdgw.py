"""The etcd gateway client against a real 3-member etcd cluster on loopback (issue 28): the
calls a state backend and its leases rest on, and what a dead member or a lost quorum does to
them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controllers.waiting import until
from state.etcdgw import (
    Compare,
    Delete,
    EtcdGateway,
    EtcdRefused,
    EtcdUnavailable,
    Get,
    Put,
    prefix_end,
)
from tests.etcd_cluster import EtcdCluster

ODD = "odd \u202e \n bytes \x00 é".encode() + bytes(range(256))


@pytest.fixture
def gateway(etcd_cluster: EtcdCluster) -> Iterator[EtcdGateway]:
    client = EtcdGateway(etcd_cluster.endpoints, timeout_s=1.0)
    yield client
    client.close()


def test_keys_round_trip_any_bytes_and_a_prefix_scan_stops_at_its_prefix(
        gateway: EtcdGateway) -> None:
    gateway.put("/r/resources/Deployment/a", ODD)
    gateway.put("/r/resources/Deployment/b", b"{}")
    gateway.put("/r/resources/DeploymentX/c", b"not under the prefix")
    got = gateway.get("/r/resources/Deployment/a")
    assert got is not None
    assert got.value == ODD
    assert got.create_revision == got.mod_revision > 0
    assert [kv.key for kv in gateway.scan("/r/resources/Deployment/")] == [
        "/r/resources/Deployment/a", "/r/resources/Deployment/b"]
    assert gateway.get("/r/none") is None
    assert gateway.delete("/r/resources/Deployment/", prefix=True) == 2
    assert [kv.key for kv in gateway.scan("/r/")] == ["/r/resources/DeploymentX/c"]
    assert prefix_end("/r/") == b"/r0"
    assert prefix_end("a\xff") == b"a\xc3\xc0"  # the last byte of its UTF-8, plus one


def test_a_create_if_absent_transaction_lets_exactly_one_writer_win(
        gateway: EtcdGateway) -> None:
    key = "/r/instance"
    first = gateway.txn([Compare.absent(key)], [Put(key, b"owner-1")], [Get(key)])
    second = gateway.txn([Compare.absent(key)], [Put(key, b"owner-2")], [Get(key)])
    assert first.succeeded
    assert not second.succeeded
    (held,) = second.found  # the loser reads the winner's value in the same transaction
    assert held is not None
    assert held.value == b"owner-1"


def test_a_write_guarded_by_the_revision_it_read_fails_after_another_write(
        gateway: EtcdGateway) -> None:
    key = "/r/resources/Deployment/a"
    gateway.put(key, b"v1")
    read = gateway.get(key)
    assert read is not None
    gateway.put(key, b"v2 by someone else")
    stale = gateway.txn([Compare.unchanged(key, read.mod_revision)], [Put(key, b"v3")])
    assert not stale.succeeded
    fresh = gateway.get(key)
    assert fresh is not None
    assert fresh.value == b"v2 by someone else"
    assert gateway.txn([Compare.unchanged(key, fresh.mod_revision)],
                       [Put(key, b"v3"), Delete("/r/history/a")]).succeeded


def test_a_key_bound_to_a_lease_goes_with_it(gateway: EtcdGateway) -> None:
    lease = gateway.grant(1)
    assert lease.ttl_s == 1
    gateway.put("/r/hosts/edge/owner", b"replica-1", lease=lease.id)
    assert gateway.keepalive(lease.id) == 1
    got = gateway.get("/r/hosts/edge/owner")
    assert got is not None
    assert got.lease == lease.id
    # Without keep-alives the lease expires and its key is deleted by the cluster itself.
    assert until(lambda: True if gateway.get("/r/hosts/edge/owner") is None else None,
                 timeout_s=10, pace=0.1)
    assert gateway.time_to_live(lease.id) == -1
    assert gateway.keepalive(lease.id) == 0
    revoked = gateway.grant(60)
    gateway.put("/r/hosts/far/owner", b"replica-2", lease=revoked.id)
    gateway.revoke(revoked.id)
    assert gateway.get("/r/hosts/far/owner") is None
    gateway.revoke(revoked.id)  # again: nothing to revoke is no error
    with pytest.raises(EtcdRefused, match="requested lease not found") as refused:
        gateway.put("/r/x", b"", lease=revoked.id)
    assert refused.value.code == 5


def test_one_dead_member_changes_nothing_and_a_lost_quorum_is_said_per_member(
        etcd_cluster: EtcdCluster, gateway: EtcdGateway) -> None:
    gateway.put("/r/a", b"1")
    etcd_cluster.kill("m1")  # the member the client asks first
    assert gateway.put("/r/a", b"2") > 0  # the next member answers
    etcd_cluster.kill("m2")
    with pytest.raises(EtcdUnavailable) as lost:
        gateway.put("/r/a", b"3")
    said = str(lost.value)
    assert said.startswith("no etcd member answered /v3/kv/put: ")
    for endpoint in etcd_cluster.endpoints:
        assert endpoint in said  # dead ones refuse, the lone one cannot reach a quorum
    etcd_cluster.start("m1")
    etcd_cluster.start("m2")

    def back() -> bool | None:
        try:
            return gateway.put("/r/a", b"4") > 0
        except EtcdUnavailable:
            return None
    assert until(back, timeout_s=30, pace=0.2)
    got = gateway.get("/r/a")
    assert got is not None
    assert got.value == b"4"  # nothing written while there was no quorum
