"""A capacity window's verdict from what its streams did (pure: ``capacity.runtype.judge``)."""

from __future__ import annotations

import dataclasses

from controllers.kinds.experiments.capacity.runtype import judge
from controllers.kinds.experiments.capacity.search import Verdict
from controllers.kinds.experiments.cleanup import CleanupEvidence, CleanupReport
from controllers.kinds.experiments.driver import Measured
from controllers.kinds.experiments.ledger import UnitOutcome
from controllers.kinds.streamset.caption_events import CaptionChunk
from specs.experiments.capacity import CapacitySpec

CAP = CapacitySpec(initialStreamCount=2, maxStreamCount=8, maxP95LatencyMs=500)


STAMP, STAMP_UNIX = "2026-12-05T10:00:00.000Z", 1_796_464_800.0


def unit(name: str, *latencies: float, ids: list[int] | None = None,
         rejected: str = "") -> UnitOutcome:
    """Chunks whose latency is ``latencies`` both ways: the server's ``chunk_latency_ms`` and
    receive time - ``media_info.end_timestamp``."""
    numbers = ids if ids is not None else list(range(len(latencies)))
    chunks = [CaptionChunk(content="a red frame", chunk_id=i, frame_count=5,
                           chunk_latency_ms=ms, end_timestamp=STAMP,
                           received_unix=STAMP_UNIX + ms / 1000)
              for i, ms in zip(numbers, latencies, strict=True)]
    return UnitOutcome(source=name, repetition=0, admitted=not rejected, rejected=rejected,
                       chunks=chunks, cleaned_up=True)


def clean() -> CleanupReport:
    return CleanupReport(evidence=CleanupEvidence(streamsLeft=[], streamsListed=[]))


def test_every_stream_answering_within_the_latency_is_stable() -> None:
    verdict, reason, report = judge(Measured([unit("s1", 100, 120), unit("s2", 90, 480)], 2, []),
                                    CAP, clean())
    assert verdict is Verdict.STABLE, reason
    assert reason == "2/2 streams completed, p95 480 ms, 0 dropped chunks"
    assert report.ledger.offered == 2


def test_p95_above_the_maximum_is_unstable_naming_both_numbers() -> None:
    verdict, reason, _ = judge(Measured([unit("s1", 100, 900), unit("s2", 100, 950)], 2, []),
                               CAP, clean())
    assert verdict is Verdict.UNSTABLE
    assert reason == "p95 chunk latency 950 ms is above 500 ms"


def test_a_rejected_stream_fails_the_success_rate_naming_it() -> None:
    verdict, reason, _ = judge(Measured([unit("s1", 100), unit("s2", rejected="503 busy")], 1,
                                        []), CAP, clean())
    assert verdict is Verdict.UNSTABLE
    assert reason.startswith("1/2 streams completed (minimum 100%): s2: rejected: 503 busy")


def test_a_lower_success_rate_tolerates_one_failed_stream_but_never_a_dropped_chunk() -> None:
    lenient = CAP.model_copy(update={"minSuccessRate": 0.5})
    ok = judge(Measured([unit("s1", 100), unit("s2", rejected="503 busy")], 1, []), lenient,
               clean())
    assert ok[0] is Verdict.STABLE, ok[1]
    dropped = judge(Measured([unit("s1", 100, 100, ids=[1, 3]), unit("s2", 100)], 2, []),
                    lenient, clean())
    assert dropped[0] is Verdict.UNSTABLE
    assert "1 dropped chunk(s)" in dropped[1]


def test_no_answered_chunk_is_unstable_never_low_latency() -> None:
    verdict, reason, _ = judge(Measured([unit("s1")], 1, []), CAP, clean())
    assert verdict is Verdict.UNSTABLE
    assert "no answered chunk" in reason


def test_one_stream_failing_while_the_others_answer_is_inconclusive_not_a_capacity_signal(
        ) -> None:
    broken = unit("s2", 100)
    broken.chunks = [dataclasses.replace(broken.chunks[0], error="decoder error")]
    verdict, reason, _ = judge(Measured([unit("s1", 100, 110), broken, unit("s3", 90)], 3, []),
                               CAP, clean())
    assert verdict is Verdict.INCONCLUSIVE
    assert reason == ("a stream failed (a fault, not a capacity signal): s2: error inside a 200 "
                      "answer (1x): decoder error")
    every = [unit(f"s{i}", 100) for i in range(3)]
    for u in every:
        u.chunks = [dataclasses.replace(u.chunks[0], error="overloaded")]
    assert judge(Measured(every, 3, []), CAP, clean())[0] is Verdict.UNSTABLE  # that is load


def test_a_stream_starved_of_answers_under_load_is_a_capacity_signal_not_a_fault() -> None:
    verdict, reason, _ = judge(Measured([unit("s1", 900, 2500), unit("s2")], 2, []), CAP,
                               clean())
    assert verdict is Verdict.UNSTABLE, reason
    assert "s2: no chunk with fresh frames" in reason


def test_residue_the_window_cannot_prove_gone_makes_it_inconclusive() -> None:
    left = judge(Measured([unit("s1", 100)], 1, ["sid-1"]), CAP, clean())
    assert left[0] is Verdict.INCONCLUSIVE
    assert left[1] == "zero residue not proven: stream(s) not deleted: sid-1"
    files = CleanupReport(problems=["1 file(s) left on the service"])
    residue = judge(Measured([unit("s1", 100)], 1, []), CAP, files)
    assert residue[0] is Verdict.INCONCLUSIVE
    assert "1 file(s) left" in residue[1]


def test_latency_is_measured_the_harness_way_unless_the_server_view_is_asked() -> None:
    late = unit("s1", 100, 120)
    # The server says 100-120 ms; the source's stamp says each arrived 900 ms later than that.
    late.chunks = [dataclasses.replace(c, received_unix=(c.received_unix or 0) + 0.9)
                   for c in late.chunks]
    verdict, _, report = judge(Measured([late], 1, []), CAP, clean())
    assert verdict is Verdict.UNSTABLE
    assert report.latencySource == "ntp_timestamp"
    assert report.chunkLatencyMs.p95 == 1020.0, report
    verdict, _, report = judge(Measured([late], 1, []), CAP, clean(), "processing_latency")
    assert verdict is Verdict.STABLE
    assert report.chunkLatencyMs.p95 == 120


def test_answers_without_the_latency_field_are_not_measured_never_a_failure_of_the_stream(
        ) -> None:
    bare = unit("s1", 100, 120)
    bare.chunks = [dataclasses.replace(c, chunk_latency_ms=None) for c in bare.chunks]
    verdict, reason, report = judge(Measured([bare], 1, []), CAP, clean(), "processing_latency")
    assert verdict is Verdict.INCONCLUSIVE, reason
    assert "not measured: none of 2 answered chunk(s) carried chunk_latency_ms" in reason
    assert "ENABLE_REQUEST_PROFILING=true" in reason
    assert report.ledger.completed == 1  # the stream answered: no failed work
    assert judge(Measured([bare], 1, []), CAP, clean())[0] is Verdict.STABLE  # the NTP way
