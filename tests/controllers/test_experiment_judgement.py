"""The canary's pure judgements: semantic isolation, percentiles, dropped chunks, the ledger."""

from __future__ import annotations

from controllers.kinds.experiments import isolation
from controllers.kinds.experiments.ledger import (
    UnitOutcome,
    dropped_count,
    ledger_of,
    percentile,
    performance_report,
)
from controllers.kinds.streamset.caption_events import CaptionChunk
from specs.errors import SpecError
from specs.validate import parse_text

LABELS = {"red-solid": "red solid", "red-border": "red border", "blue-solid": "blue solid"}


def said(*texts: str, frames: int = 3) -> list[CaptionChunk]:
    return [CaptionChunk(content=t, chunk_id=i, frame_count=frames) for i, t in enumerate(texts)]


def test_an_answer_must_name_its_own_label_and_no_other_label_whole() -> None:
    labels = list(LABELS.values())
    assert isolation.judge_answer("The frame shows solid RED.", "red solid", labels) is None
    assert isolation.judge_answer("RED with a BLACK border.", "red border", labels) is None
    wrong = isolation.judge_answer("The frame shows solid BLUE.", "red solid", labels)
    assert wrong is not None
    assert "that is blue solid" in wrong
    mixed = isolation.judge_answer("solid red and solid blue", "red solid", labels)
    assert mixed is not None
    assert "also names blue solid" in mixed
    assert isolation.judge_answer("", "red solid", labels) == "empty answer"


def test_every_source_needs_its_answers_and_one_wrong_answer_fails_it() -> None:
    answers = {
        "red-solid": said("solid red", "solid red", "solid red"),
        "red-border": said("red with a black border", "solid red", "red border"),  # mixed in
        "blue-solid": said("solid blue", "solid blue"),  # only two
    }
    verdicts = {v.source: v for v in isolation.judge(answers, LABELS, needed=3)}
    assert verdicts["red-solid"].passed
    assert not verdicts["red-border"].passed
    assert "that is red solid" in (
        verdicts["red-border"].problems[0])
    assert verdicts["blue-solid"].problems == ["missing answers: 2 of 3 arrived"]
    assert "red-border (red border)" in isolation.summary(list(verdicts.values()))


def test_chunks_without_frames_are_no_answer_but_errors_inside_a_200_fail() -> None:
    quiet = said("no frame", "no frame", frames=0) + said("solid red", "solid red", "solid red")
    assert isolation.judge({"red-solid": quiet}, {"red-solid": "red solid"}, 3)[0].passed
    failing = [CaptionChunk(content="", frame_count=3, error="InternalError: boom")]
    verdict = isolation.judge({"red-solid": failing}, {"red-solid": "red solid"}, 1)[0]
    assert verdict.problems == ["error inside a 200 answer: InternalError: boom"]


def test_percentiles_are_nearest_rank_and_gaps_are_dropped_chunks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (
        50.0, 95.0, 99.0)
    assert percentile([], 50) is None
    assert dropped_count([0, 1, 2, 3]) == 0
    assert dropped_count([0, 2, 3, 6]) == 3
    assert dropped_count([99_998, 99_999, 0, 1]) == 0  # chunk IDs wrap at the spec's maximum


def test_the_ledger_counts_what_a_200_hides() -> None:
    good = UnitOutcome("a", 0, admitted=True, cleaned_up=True, chunks=[
        CaptionChunk("solid red", 0, frame_count=2, chunk_latency_ms=10.0),
        CaptionChunk("solid red", 1, frame_count=2, chunk_latency_ms=30.0)])
    gap = UnitOutcome("b", 0, admitted=True, cleaned_up=True, chunks=[
        CaptionChunk("x", 0, frame_count=2), CaptionChunk("x", 2, frame_count=2)])
    empty = UnitOutcome("c", 0, admitted=True, chunks=[CaptionChunk("", 0, frame_count=2)])
    refused = UnitOutcome("d", 0, rejected="503 ServerBusy")
    silent = UnitOutcome("e", 0, admitted=True, timed_out=True)
    ledger = ledger_of([good, gap, empty, refused, silent], active=4)
    assert (ledger.offered, ledger.admitted, ledger.completed, ledger.failed) == (5, 4, 1, 4)
    assert (ledger.rejected, ledger.timed_out, ledger.cleaned_up) == (1, 1, 2)
    assert any("dropped chunks: 1" in f for f in gap.failures())
    assert empty.failures() == ["empty answer (1x)"]
    report = performance_report([good, gap], active=2, source="processing_latency")
    assert report.chunkLatencyMs.p50 == 10.0
    assert report.droppedChunks == 1
    assert report.latencyMissing == 2
    assert report.latencyNotMeasured is None


def test_what_cannot_be_judged_is_failed_work_never_a_silent_pass() -> None:
    def unit(*chunks: CaptionChunk, broken: str = "") -> list[str]:
        return UnitOutcome("a", 0, admitted=True, broken=broken, chunks=list(chunks)).failures()
    ok = CaptionChunk("solid red", 0, frame_count=2, chunk_latency_ms=5.0)
    assert unit(ok) == []
    assert unit(CaptionChunk("solid red", None, frame_count=2, chunk_latency_ms=5.0)) == [
        "1 chunk(s) without chunk_id: dropped chunks cannot be counted"]
    # A field a real server may leave out is a measure not taken (said so), not failed work.
    bare = CaptionChunk("solid red", 0, frame_count=2)
    assert unit(bare) == []
    report = performance_report([UnitOutcome("a", 0, admitted=True, chunks=[bare])], 1)
    assert report.latencyNotMeasured == (
        "not measured: none of 1 answered chunk(s) carried media_info.end_timestamp")
    assert report.chunkLatencyMs.p95 is None
    back = unit(ok, CaptionChunk("solid red", 5, frame_count=2, chunk_latency_ms=5.0),
                CaptionChunk("solid red", 4, frame_count=2, chunk_latency_ms=5.0))
    assert back == ["dropped chunks: 4 (chunk_id 0→5)", "chunk_id repeated or went back (5→4)"]
    assert unit(ok, broken="connection reset") == [
        "stream broke before its window ended: connection reset"]


def test_a_32_stream_synthetic_canary_is_refused_at_validate_with_its_location() -> None:
    text = """apiVersion: rtvi.reconciler/v1
kind: Experiment
metadata: {name: big}
spec:
  type: canary
  runId: big-001
  template: vlm
  service: {hostPort: 18100}
  measurement: {claim: thirty-two streams}
  canary:
    streams: 32
"""
    try:
        parse_text(text, "big.yaml")
    except SpecError as exc:
        located = [str(i) for i in exc.issues]
    else:
        raise AssertionError("a 32-stream synthetic canary was accepted")
    assert any(line.startswith("big.yaml:11:") and "checksum-pinned object media" in line
               for line in located), located


def test_a_run_over_its_budget_is_stopped_and_says_why() -> None:
    import threading

    from controllers.kinds.experiments.board import RunBoard
    from controllers.waiting import pause

    board = RunBoard(stop=threading.Event())
    said: list[str] = []
    ended = threading.Event()

    def work(stop: threading.Event) -> str:
        try:
            pause(stop, 30)  # a long phase: only the stop ends it
        finally:
            ended.set()
        return "PASS"
    woken = threading.Event()
    def overrun() -> bool:
        said.append("over")
        return True
    assert board.start("slow-1", work, budget_s=0.2, on_overrun=overrun, on_end=woken.set)
    assert not board.start("slow-1", work)  # one run per run ID at a time
    assert ended.wait(10)
    assert said == ["over"]
    assert woken.wait(10)  # its end wakes the Experiment's next pass
    board.close()


def test_shutdown_stops_every_run_and_refuses_new_ones() -> None:
    import threading

    from controllers.kinds.experiments.board import RunBoard
    from controllers.waiting import pause

    shutdown = threading.Event()
    board = RunBoard(stop=shutdown)
    ended = threading.Event()

    def work(stop: threading.Event) -> str:
        try:
            pause(stop, 30)
        finally:
            ended.set()
        return "PASS"
    assert board.start("long-1", work)
    shutdown.set()
    assert ended.wait(10)
    assert not board.start("long-2", work)
    board.close()


def test_gpu_memory_is_measured_where_it_can_be_and_never_passed_where_not() -> None:
    import threading

    from controllers.errors import TemporaryError
    from controllers.kinds.experiments import gpumemory

    assert gpumemory.measure(None, []).as_evidence() == gpumemory.NO_GPU

    def broken() -> dict[str, int]:
        raise TemporaryError("nvidia-smi exited 9")
    unread = gpumemory.measure(broken, ["GPU-a"])
    assert unread.mib is None
    assert "nvidia-smi exited 9" in unread.why_not
    # Unmeasurable after cleanup is a problem, not a pass.
    baseline = gpumemory.GpuMemory({"GPU-a": 100})
    _, problems = gpumemory.back_to_baseline(broken, ["GPU-a"], baseline, 0.0,
                                             threading.Event())
    assert problems
    assert "not measured" in problems[0]
    readings = iter([{"GPU-a": 9000}, {"GPU-a": 300}])
    now, problems = gpumemory.back_to_baseline(lambda: next(readings), ["GPU-a"], baseline, 5.0,
                                               threading.Event())
    assert problems == []
    assert now.mib == {"GPU-a": 300}
    _, held = gpumemory.back_to_baseline(lambda: {"GPU-a": 9000}, ["GPU-a"], baseline, 0.0,
                                         threading.Event())
    assert held == ["GPU GPU-a: 9000 MiB in use, 8900 MiB above its baseline of 100 MiB (512 "
                    "allowed)"]
