"""Prometheus metrics of the daemon (prometheus-client; served on loopback by default).

Reconcile duration per kind, queue depth, errors per kind and reason, events recorded per kind
and reason (promotions, rejections and rollbacks among them), and Docker API calls per
Host — the last read from the sessions at scrape time so every call is counted without
threading a counter through the clients.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from reconciler.workqueue import QueueStats
from state.diskhealth import WRITES
from state.models import Event

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class Scraped(Protocol):
    """What a scrape reads from the daemon (a protocol, so that this module does not import
    the daemon that owns it)."""

    def queue_stats(self) -> QueueStats: ...

    def api_calls(self) -> Iterable[tuple[str, float]]:
        """(target, calls so far): ``docker:<host>``, ``http:<call>`` and, with its records
        in etcd, ``etcd:<call>``."""
        ...

    def replica_state(self) -> tuple[int, bool] | None:
        """(shares held, acting) of a replica among others; None for a lone daemon."""
        ...


class _ApiCalls(Collector):
    def __init__(self, daemon: Scraped) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("rtvi_reconciler_api_calls",
                                     "API calls made, per target", labels=["target"])
        for target, calls in self.daemon.api_calls():
            family.add_metric([target], calls)
        yield family


class Metrics:
    def __init__(self, daemon: Scraped) -> None:
        self.registry = CollectorRegistry()
        self.duration = Histogram("rtvi_reconciler_reconcile_duration_seconds",
                                  "Time of one reconcile pass", ["kind"],
                                  buckets=DURATION_BUCKETS, registry=self.registry)
        self.errors = Counter("rtvi_reconciler_reconcile_errors", "Failed reconcile passes",
                              ["kind", "reason"], registry=self.registry)
        # Every event this daemon recorded, by kind, type and reason: promotions (Promoted),
        # rejections (PromotionRejected), rollbacks (RolledBack), pulls, recreates, ...
        self.events = Counter("rtvi_reconciler_events", "Events recorded, by kind and reason",
                              ["kind", "type", "reason"], registry=self.registry)
        depth = Gauge("rtvi_reconciler_queue_depth", "Keys waiting in the work queue",
                      registry=self.registry)
        depth.set_function(lambda: daemon.queue_stats().depth)
        processing = Gauge("rtvi_reconciler_queue_processing",
                           "Keys whose pass is running now", registry=self.registry)
        processing.set_function(lambda: daemon.queue_stats().processing)
        failing = Gauge("rtvi_reconciler_state_writes_failing",
                        "1 while writes to the state directory fail (a full or read-only "
                        "disk), else 0", registry=self.registry)
        failing.set_function(lambda: 0 if WRITES.failing is None else 1)
        shares = Gauge("rtvi_reconciler_replica_shares",
                       "Shares (Hosts, and 'fleet' for Host-less work) this replica holds; "
                       "0 for a lone daemon", registry=self.registry)
        shares.set_function(lambda: (daemon.replica_state() or (0, True))[0])
        acting = Gauge("rtvi_reconciler_replica_acting",
                       "0 while this replica acts on nothing (its lease lost, no etcd "
                       "quorum), else 1", registry=self.registry)
        acting.set_function(lambda: int((daemon.replica_state() or (0, True))[1]))
        self.registry.register(_ApiCalls(daemon))
        self._server: WSGIServer | None = None

    def serve(self, address: str, port: int) -> None:
        server, _ = start_http_server(port, addr=address, registry=self.registry)
        self._server = server

    def observe(self, kind: str, seconds: float) -> None:
        self.duration.labels(kind=kind).observe(seconds)

    def error(self, kind: str, reason: str) -> None:
        self.errors.labels(kind=kind, reason=reason).inc()

    def event(self, event: Event) -> None:
        """Count one recorded event (an event log's observer)."""
        kind = event.resource.partition("/")[0]
        self.events.labels(kind=kind, type=event.type, reason=event.reason).inc()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
