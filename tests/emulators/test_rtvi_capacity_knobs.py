"""The RTVI emulator's capacity knobs: latency that grows per live stream, a breach only above
capacity K, jitter, and an older release's deletes; set at start-up or at run time. Served
in-process (``tests/inproc_rtvi.py``): no decoding is needed to read the knobs' effect."""

from __future__ import annotations

import httpx
import pytest

from emulators.rtvi.knobs import Knobs, KnobValues
from tests.inproc_rtvi import inproc_rtvi


def _knobs(**values: object) -> Knobs:
    base = {"max_streams": None, "latency_ms": 100.0, "latency_per_stream_ms": 10.0,
            "drain_s": 1.0}
    return Knobs(KnobValues(**{**base, **values}), seed=7)  # type: ignore[arg-type]


def test_latency_grows_per_stream_and_breaches_only_above_capacity() -> None:
    knobs = _knobs(breach_above=5, breach_ms=1000.0)
    assert knobs.vlm_latency_s(0) == pytest.approx(0.100)
    assert knobs.vlm_latency_s(5) == pytest.approx(0.150)
    assert knobs.vlm_latency_s(6) == pytest.approx(1.160)
    assert _knobs().vlm_latency_s(60) == pytest.approx(0.700)  # no K: no breach


def test_jitter_stays_within_its_bound_varies_and_repeats_with_its_seed() -> None:
    first = _knobs(jitter_ms=20.0).vlm_latency_s(2)
    knobs = _knobs(jitter_ms=20.0)
    values = [knobs.vlm_latency_s(2) for _ in range(200)]
    assert all(0.100 <= v <= 0.140 for v in values)
    assert len(set(values)) > 100
    assert values[0] == first  # one seed, one sequence
    assert _knobs(latency_ms=0.0, latency_per_stream_ms=0.0,
                  jitter_ms=50.0).vlm_latency_s(1) >= 0.0  # never negative


def test_the_knobs_come_from_the_environment_and_change_at_run_time() -> None:
    env = {"RTVI_EMU_BREACH_ABOVE": "9", "RTVI_EMU_BREACH_MS": "800",
           "RTVI_EMU_JITTER_MS": "5", "RTVI_EMU_LEGACY_DELETE": "1"}
    with inproc_rtvi(**env) as emu:
        values = emu.app.knobs.values
        assert (values.breach_above, values.breach_ms, values.jitter_ms,
                values.legacy_delete) == (9, 800.0, 5.0, True)
        with httpx.Client(base_url=emu.url, trust_env=False) as http:
            changed = http.post("/emulator/knobs", json={
                "breach_above": 14, "breach_ms": 250, "jitter_ms": 0, "legacy_delete": False})
            assert changed.status_code == 200, changed.text
            assert {k: changed.json()[k] for k in ("breach_above", "breach_ms", "jitter_ms",
                                                   "legacy_delete")} == {
                "breach_above": 14, "breach_ms": 250.0, "jitter_ms": 0.0,
                "legacy_delete": False}
            assert http.post("/emulator/knobs", json={"breach_above": None}).json()[
                "breach_above"] is None
            for bad in ({"breach_above": -1}, {"jitter_ms": "lots"},
                        {"legacy_delete": "yes"}):
                assert http.post("/emulator/knobs", json=bad).status_code == 422, bad
