"""Injected faults: 5xx answers and slow responses, by path prefix, for the next N requests.

Why: the reconciler's retry, backoff and "a failed list is an error, never 'no streams'" rules
are only testable against a service that fails on cue. Faults apply to the service API (never to
``/emulator/`` admin paths, so a test can always undo what it set up). A random failure rate
(``RTVI_EMU_FAIL_RATE``) applies to ``/v1/`` paths except health, so orchestration probes stay
meaningful while the API is flaky.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass

from emulators.rtvi.routing import Response

ADMIN_PREFIX = "/emulator/"
HEALTH_PREFIXES = ("/v1/health/", "/v1/ready", "/v1/live", "/v1/startup")
INJECTED_CODE = "InternalServerError"


@dataclass
class FaultRule:
    path_prefix: str
    remaining: int
    status: int | None  # None: delay only
    delay_s: float


@dataclass(frozen=True)
class FaultDecision:
    delay_s: float
    response: Response | None


class FaultTable:
    """Rules in order of registration; a request consumes every rule whose prefix it matches."""

    def __init__(self, fail_rate: float, seed: int | None) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._fail_rate = fail_rate
        self._random = random.Random(seed)
        self.injected_total = 0

    def add(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules.append(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[dict[str, object]]:
        with self._lock:
            return [asdict(rule) for rule in self._rules]

    def decide(self, path: str) -> FaultDecision:
        if path.startswith(ADMIN_PREFIX):
            return FaultDecision(0.0, None)
        delay = 0.0
        status: int | None = None
        with self._lock:
            for rule in self._rules:
                if path.startswith(rule.path_prefix) and rule.remaining > 0:
                    rule.remaining -= 1
                    delay += rule.delay_s
                    status = status or rule.status
            self._rules = [rule for rule in self._rules if rule.remaining > 0]
            if (
                status is None
                and self._fail_rate > 0
                and path.startswith("/v1/")
                and not path.startswith(HEALTH_PREFIXES)
                and self._random.random() < self._fail_rate
            ):
                status = 500
            if status is not None:
                self.injected_total += 1
        if status is None:
            return FaultDecision(delay, None)
        return FaultDecision(
            delay, Response.error(status, INJECTED_CODE, f"injected fault ({status})")
        )
