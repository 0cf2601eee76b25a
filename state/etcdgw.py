"""A small, typed etcd v3 client over etcd's JSON gateway (issue 28's state backend below it).

Why the gateway with httpx instead of a client library: every etcd since 3.4 serves the v3 API
as JSON over HTTP on its client port (``/v3/kv/range``, ``/v3/kv/txn``, ``/v3/lease/grant``...),
so the calls a state backend needs (a read, a prefix scan, a transaction that compares a key's
revisions, a lease and its keep-alive) are plain POSTs. httpx is a dependency already and is
typed; ``aetcd`` brings grpcio and asyncio to a synchronous store, and ``etcd3gw`` brings
``requests`` and no types. What the gateway's JSON means (checked against etcd 3.4 here):
keys and values are base64; 64-bit integers are strings; fields at their zero value are left
out (a transaction that failed has no ``succeeded``, an empty range no ``kvs``); an error is
an HTTP error with ``{"error", "message", "code"}`` (gRPC codes: 14 "request timed out" when
the member has no quorum).

Endpoints: the client asks the member that answered last, and the next one when a member
cannot be reached, so one dead member costs one failed connection, not every call. A member
without quorum answers after its own request timeout (about 6 s on etcd 3.4); ``timeout_s``
bounds how long a call waits for one member.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from state.errors import StateError

DEFAULT_TIMEOUT_S = 3.0
GRPC_NOT_FOUND = 5
GRPC_UNAVAILABLE = 14  # no quorum or no leader: another member may answer
Target = Literal["CREATE", "MOD", "VERSION", "VALUE", "LEASE"]
Result = Literal["EQUAL", "NOT_EQUAL", "GREATER", "LESS"]


class EtcdUnavailable(StateError):
    """No member answered (each one's reason in the message): retry later, change nothing."""


class EtcdRefused(StateError):
    """A member answered with an error (its gRPC code and message)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: str) -> bytes:
    """The ``range_end`` that makes a range every key starting with ``prefix`` (the prefix
    with its last byte plus one, as etcd defines it)."""
    raw = bytearray(prefix.encode())
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return bytes(raw)
        raw.pop()
    return b"\x00"  # every key


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0

    @classmethod
    def of(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(_unb64(kv["key"]).decode(), _unb64(kv.get("value", "")),
                   int(kv.get("create_revision", 0)), int(kv.get("mod_revision", 0)),
                   int(kv.get("lease", 0)))


@dataclass(frozen=True)
class Compare:
    """One condition of a transaction: the key's ``target`` compared with ``value``."""

    key: str
    target: Target
    value: int | bytes
    result: Result = "EQUAL"

    def json(self) -> dict[str, Any]:
        field_name = {"CREATE": "create_revision", "MOD": "mod_revision",
                      "VERSION": "version", "VALUE": "value", "LEASE": "lease"}[self.target]
        value = _b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": _b64(self.key), "target": self.target, "result": self.result,
                field_name: value}

    @classmethod
    def absent(cls, key: str) -> Compare:
        """The key does not exist (it was never created, or was deleted)."""
        return cls(key, "CREATE", 0)

    @classmethod
    def unchanged(cls, key: str, mod_revision: int) -> Compare:
        """The key was last written at ``mod_revision`` (0: it does not exist)."""
        return cls(key, "MOD", mod_revision)


@dataclass(frozen=True)
class Put:
    key: str
    value: bytes
    lease: int = 0

    def json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
        if self.lease:
            body["lease"] = str(self.lease)
        return {"request_put": body}


@dataclass(frozen=True)
class Delete:
    key: str
    prefix: bool = False

    def json(self) -> dict[str, Any]:
        body = {"key": _b64(self.key)}
        if self.prefix:
            body["range_end"] = _b64(prefix_end(self.key))
        return {"request_delete_range": body}


@dataclass(frozen=True)
class Get:
    key: str

    def json(self) -> dict[str, Any]:
        return {"request_range": {"key": _b64(self.key)}}


Op = Put | Delete | Get


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    # What each Get of the branch that ran found (None: the key was absent), in order.
    found: list[KeyValue | None] = field(default_factory=list)


@dataclass(frozen=True)
class Lease:
    id: int
    ttl_s: int


class EtcdGateway:
    """Synchronous and thread-safe; ``close()`` when done."""

    def __init__(self, endpoints: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._http = httpx.Client(timeout=timeout_s, trust_env=False)
        self._lock = threading.Lock()
        self._current = 0
        self.writes = 0  # puts, deletes and transactions that changed something
        self.calls: Counter[str] = Counter()
        """Requests answered, by API path without ``/v3/`` (``kv/range``, ``kv/txn``, ...):
        what a pass or a resync costs in round trips (the daemon's metrics show them)."""

    def close(self) -> None:
        self._http.close()

    # --- keys ------------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        kvs = self._call("/v3/kv/range", {"key": _b64(key)}).get("kvs") or []
        return KeyValue.of(kvs[0]) if kvs else None

    def scan(self, prefix: str, after: str | None = None, limit: int = 0,
             newest_first: bool = False, keys_only: bool = False) -> list[KeyValue]:
        """Keys under ``prefix`` (those after the key ``after``, when given), in key order
        (reversed with ``newest_first``), at most ``limit`` of them (0: all); with
        ``keys_only`` their values are not sent (each value is then empty)."""
        start = prefix if after is None else after + "\0"
        body: dict[str, Any] = {"key": _b64(start), "range_end": _b64(prefix_end(prefix))}
        if keys_only:
            body["keys_only"] = True
        if limit:
            body["limit"] = str(limit)
        if newest_first:
            body |= {"sort_order": "DESCEND", "sort_target": "KEY"}
        return [KeyValue.of(kv) for kv in self._call("/v3/kv/range", body).get("kvs") or []]

    def revision(self) -> int:
        """The cluster's revision now (every change raises it by one)."""
        answer = self._call("/v3/kv/range", {"key": _b64("\0"), "count_only": True})
        return int(answer["header"].get("revision", 0))

    def changed(self, prefix: str, after_revision: int, timeout_s: float) -> bool:
        """Wait, through etcd's watch, until a key under ``prefix`` changes after revision
        ``after_revision``; True when one did, False when ``timeout_s`` passed first or the
        member went away (the next call asks another member: a reader then reads again, and
        an unreachable cluster surfaces there, with every member's reason)."""
        with self._lock:
            index = self._current
        body = {"create_request": {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix)),
                                   "start_revision": str(after_revision + 1)}}
        timeout = httpx.Timeout(self._http.timeout.connect, read=timeout_s)
        try:
            with self._http.stream("POST", self.endpoints[index] + "/v3/watch", json=body,
                                   timeout=timeout) as response:
                if response.status_code != httpx.codes.OK:
                    with self._lock:  # this member will not watch: the next call asks another
                        self._current = (index + 1) % len(self.endpoints)
                    return False
                for line in response.iter_lines():
                    result = json_object(line).get("result") or {}
                    if result.get("events") or result.get("canceled"):
                        return True  # canceled: compacted past it, so read everything again
        except httpx.ReadTimeout:
            return False
        except httpx.TransportError:
            with self._lock:
                self._current = (index + 1) % len(self.endpoints)
        return False

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Write ``key``; the cluster's revision after it."""
        body = Put(key, value, lease).json()["request_put"]
        revision = int(self._call("/v3/kv/put", body)["header"].get("revision", 0))
        self._wrote()
        return revision

    def delete(self, key: str, prefix: bool = False) -> int:
        """Delete ``key`` (or every key under it); how many were deleted."""
        body = Delete(key, prefix).json()["request_delete_range"]
        deleted = int(self._call("/v3/kv/deleterange", body).get("deleted", 0))
        self._wrote(deleted)
        return deleted

    def delete_below(self, prefix: str, end: str) -> int:
        """Delete the keys under ``prefix`` that sort before ``end``; how many."""
        body = {"key": _b64(prefix), "range_end": _b64(end)}
        deleted = int(self._call("/v3/kv/deleterange", body).get("deleted", 0))
        self._wrote(deleted)
        return deleted

    def txn(self, compare: Sequence[Compare], success: Sequence[Op],
            failure: Sequence[Op] = ()) -> TxnResult:
        """All of ``success`` if every comparison holds, else all of ``failure``: at once."""
        answer = self._call("/v3/kv/txn", {
            "compare": [c.json() for c in compare], "success": [op.json() for op in success],
            "failure": [op.json() for op in failure]})
        succeeded = bool(answer.get("succeeded", False))
        ran = success if succeeded else failure
        self._wrote(sum(not isinstance(op, Get) for op in ran))
        found: list[KeyValue | None] = []
        for op, response in zip(ran, answer.get("responses") or [], strict=False):
            if isinstance(op, Get):
                kvs = (response.get("response_range") or {}).get("kvs") or []
                found.append(KeyValue.of(kvs[0]) if kvs else None)
        return TxnResult(succeeded, int(answer["header"].get("revision", 0)), found)

    # --- leases ----------------------------------------------------------------------------

    def grant(self, ttl_s: int) -> Lease:
        answer = self._call("/v3/lease/grant", {"TTL": str(ttl_s)})
        return Lease(int(answer["ID"]), int(answer.get("TTL", 0)))

    def keepalive(self, lease_id: int) -> int:
        """Renew the lease; its TTL again, or 0 when it has expired (its keys are gone)."""
        answer = self._call("/v3/lease/keepalive", {"ID": str(lease_id)})
        return int((answer.get("result") or {}).get("TTL", 0))

    def time_to_live(self, lease_id: int) -> int:
        """Seconds the lease has left; -1 once it has expired or was revoked."""
        return self.lease_times(lease_id)[0]

    def lease_times(self, lease_id: int) -> tuple[int, int]:
        """(seconds left, seconds granted) of the lease; left is -1 once it is gone. Granted
        minus left is how long ago it was last renewed."""
        answer = self._call("/v3/lease/timetolive", {"ID": str(lease_id)})
        return int(answer.get("TTL", -1)), int(answer.get("grantedTTL", 0))

    def revoke(self, lease_id: int) -> None:
        """End the lease now: its keys are deleted. An unknown lease is no error."""
        try:
            self._call("/v3/lease/revoke", {"ID": str(lease_id)})
        except EtcdRefused as exc:
            if exc.code != GRPC_NOT_FOUND:
                raise

    def _wrote(self, count: int = 1) -> None:
        if count:
            with self._lock:
                self.writes += 1

    # --- transport -------------------------------------------------------------------------

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            first = self._current
        reasons: list[str] = []
        for step in range(len(self.endpoints)):
            index = (first + step) % len(self.endpoints)
            endpoint = self.endpoints[index]
            try:
                response = self._http.post(endpoint + path, json=body)
            except httpx.TimeoutException:
                reasons.append(f"{endpoint}: no answer within {self._http.timeout.read}s")
                continue
            except httpx.TransportError as exc:
                reasons.append(f"{endpoint}: {type(exc).__name__}: {exc}")
                continue
            answer = _json(response)
            if response.status_code != httpx.codes.OK:
                code = int(answer.get("code", 0))
                message = str(answer.get("message") or answer.get("error") or response.text)
                if code == GRPC_UNAVAILABLE:
                    reasons.append(f"{endpoint}: {message[:200]}")
                    continue
                raise EtcdRefused(f"etcd at {endpoint} refused {path}: {message[:300]}", code)
            with self._lock:
                self._current = index
                self.calls[path.removeprefix("/v3/")] += 1
            return answer
        raise EtcdUnavailable(f"no etcd member answered {path}: " + "; ".join(reasons))


def json_object(text: str | bytes) -> dict[str, Any]:
    """``text`` as a JSON object (a streamed answer's message, a lock holder's record), or {}
    when it is not one."""
    try:
        message = json.loads(text)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        answer = response.json()
    except ValueError:
        return {"message": response.text[:300]}
    return answer if isinstance(answer, dict) else {"message": str(answer)[:300]}
