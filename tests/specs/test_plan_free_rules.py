"""Rules that need no engine run in ``validate`` (issue 26): an Experiment's own GPUs against
every Deployment's, pairings that come back on themselves, accuracy facts that can never match,
and measurement that no budget could hold."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from specs.experiments.base import R_CONTRACT
from specs.experiments.benchmark import R_BENCH
from specs.experiments.canary import R_CANARY
from specs.experiments.capacity import R_CAPACITY
from specs.experiments.portvalidation import R_PORT
from specs.rules import R10
from specs.streamrules import R_CHUNKS
from tests.specs.every_field import DOCS, changed, refusals


def _find(kind_name: str) -> int:
    return next(i for i, d in enumerate(DOCS)
                if f"{d['kind']}/{d['metadata']['name']}" == kind_name)


def _with_docs(*extra: dict[str, Any]) -> str:
    return yaml.safe_dump_all([*DOCS, *extra], sort_keys=False)


def _bench(name: str, run: str, pair: str | None, evs: bool, scenario: str = "max_streams",
           port: int = 18600) -> dict[str, Any]:
    doc = copy.deepcopy(DOCS[_find("Experiment/bench")])
    doc["metadata"] = {"name": name}
    doc["spec"]["runId"] = run
    doc["spec"]["service"] = {"hostPort": port}
    doc["spec"]["benchmark"]["evs"] = evs
    doc["spec"]["benchmark"]["scenario"] = scenario
    if pair is None:
        doc["spec"]["benchmark"].pop("pairWith")
    else:
        doc["spec"]["benchmark"]["pairWith"] = pair
    return doc


def test_a_run_s_own_gpu_that_a_deployment_holds_is_refused() -> None:
    # Deployment vlm holds GPU 0 on Host local; the capacity run's template is on local too.
    text = changed("Experiment/capacity", ("spec", "service", "gpus"), [3, 0])
    assert ("spec.service.gpus.1", R10) in [(f, r) for f, r, _ in refusals(text)]
    assert refusals(changed("Experiment/capacity", ("spec", "service", "gpus"), [3])) == []


def test_a_pairing_that_comes_back_to_itself_is_refused_and_one_way_pairs_pass() -> None:
    one_way = _with_docs(_bench("side-a", "pair-a", "pair-b", evs=True),
                         _bench("side-b", "pair-b", None, evs=False, port=18601))
    assert refusals(one_way) == []
    mutual = _with_docs(_bench("side-a", "pair-a", "pair-b", evs=True),
                        _bench("side-b", "pair-b", "pair-a", evs=False, port=18601))
    found = [(f, r) for f, r, _ in refusals(mutual)]
    assert found.count(("spec.benchmark.pairWith", R_BENCH)) == 2


def test_a_pairing_with_the_wrong_run_names_why() -> None:
    same_side = _with_docs(_bench("side-a", "pair-a", "pair-b", evs=True),
                           _bench("side-b", "pair-b", None, evs=True, port=18601))
    other_scenario = _with_docs(_bench("side-a", "pair-a", "pair-b", evs=True),
                                _bench("side-b", "pair-b", None, evs=False, scenario="x",
                                       port=18601))
    not_a_bench = changed("Experiment/bench", ("spec", "benchmark", "pairWith"), "canary-001")
    for text in (same_side, other_scenario, not_a_bench):
        assert [(f, r) for f, r, _ in refusals(text)] == [("spec.benchmark.pairWith", R_BENCH)]


def test_a_fact_with_no_word_the_gate_can_read_is_refused() -> None:
    path = ("spec", "portValidation", "media", 0, "facts")
    found = refusals(changed("Experiment/port", path, ["cat", "3", "!!"]))
    assert [(f, r) for f, r, _ in found] == [
        ("spec.portValidation.media.0.facts.1", R_PORT),
        ("spec.portValidation.media.0.facts.2", R_PORT)]
    path = ("spec", "portValidation", "textChecks", 0, "absent")
    assert [(f, r) for f, r, _ in refusals(changed("Experiment/port", path, ["42"]))] == [
        ("spec.portValidation.textChecks.0.absent.0", R_PORT)]


def test_measurement_that_the_budget_cannot_hold_is_refused() -> None:
    canary = ("spec", "canary", "performanceSeconds")
    found = refusals(changed("Experiment/canary", canary, 86400))
    assert [(f, r) for f, r, _ in found] == [("spec.canary.performanceSeconds", R_CONTRACT)]
    window = ("spec", "capacity", "windowSeconds")
    doc = copy.deepcopy(DOCS[_find("Experiment/capacity")])
    doc["spec"]["capacity"].pop("harness")
    doc["spec"]["capacity"]["windowSeconds"] = 3600
    doc["metadata"]["name"] = "own-search"
    doc["spec"]["runId"] = "own-001"
    doc["spec"]["service"] = {"hostPort": 18700}
    found = refusals(_with_docs(doc))
    assert [(f, r) for f, r, _ in found] == [(".".join(window), R_CONTRACT)]


def test_a_wait_or_a_chunk_its_run_cannot_hold_is_refused() -> None:
    """A timeout the spec sets beyond its budget (less cleanup) would always be cut short by
    the run's deadline; a chunk longer than the time that measures it never completes."""
    timeout = ("spec", "portValidation", "requestTimeoutSeconds")
    found = refusals(changed("Experiment/port", timeout, 3600))
    assert [(f, r) for f, r, _ in found] == [(".".join(timeout), R_CONTRACT)]
    chunk = ("spec", "canary", "chunkDurationSeconds")
    found = refusals(changed("Experiment/canary", chunk, 60))  # performanceSeconds: 10
    assert [(f, r) for f, r, _ in found] == [(".".join(chunk), R_CANARY)]
    doc = copy.deepcopy(DOCS[_find("Experiment/capacity")])
    doc["spec"]["capacity"].pop("harness")
    doc["spec"]["capacity"]["chunkDurationSeconds"] = 30  # windowSeconds: 10
    doc["metadata"]["name"] = "own-search"
    doc["spec"]["runId"] = "own-001"
    doc["spec"]["service"] = {"hostPort": 18700}
    found = refusals(_with_docs(doc))
    assert [(f, r) for f, r, _ in found] == [("spec.capacity.chunkDurationSeconds", R_CAPACITY)]


def test_a_run_on_its_templates_gpus_is_refused_before_plan() -> None:
    # Every run's template is Deployment quick: given a GPU, each run without service.gpus
    # would share it (plan refused that; validate now does), the capacity run (gpus: [1]) not.
    found = refusals(changed("Deployment/quick", ("spec", "gpus"), [5]))
    runs = [d for d in DOCS if d["kind"] == "Experiment"]
    own = sum("gpus" in d["spec"]["service"] for d in runs)
    assert own == 1
    assert [(f, r) for f, r, _ in found] == [("spec.service", R10)] * (len(runs) - own)


def test_a_runs_overrides_obey_the_deployment_rules_they_would_break_there() -> None:
    """``service.env`` and ``service.gpus`` change the run's copy of its template: what the
    template could not declare, an override cannot bring in either."""
    env = ("spec", "service", "env")
    for name, value in [("MODEL_PATH", "/etc"), ("VLLM_ENFORCE_EAGER", "1"),
                        ("HF_TOKEN", "hf_abc")]:
        found = refusals(changed("Experiment/canary", env, {"RTVI_EMU_PORT": "18100",
                                                            name: value}))
        assert [f for f, _, _ in found] == [f"spec.service.env.{name}"], (name, found)
    gpus = ("spec", "service", "gpus")
    for odd in (["01"], [" 1"], [3, 3]):
        found = refusals(changed("Experiment/capacity", gpus, odd))
        assert found, odd
        assert all(f.startswith("spec.service.gpus") and r == R10 for f, r, _ in found), found


def test_captions_that_could_never_be_fresh_or_move_on_are_refused() -> None:
    captions = ("spec", "captions")
    doc = DOCS[_find("StreamSet/streams")]
    base = dict(doc["spec"]["captions"], chunkDuration=10)
    overlap = refusals(changed("StreamSet/streams", captions, {**base,
                                                               "chunkOverlapDuration": 10}))
    assert [(f, r) for f, r, _ in overlap] == [("spec.captions.chunkOverlapDuration", R_CHUNKS)]
    stale = refusals(changed("StreamSet/streams", captions, {**base, "maxCaptionAgeSeconds": 5}))
    assert [(f, r) for f, r, _ in stale] == [("spec.captions.maxCaptionAgeSeconds", R_CHUNKS)]


def test_a_number_far_below_any_meaning_is_refused() -> None:
    """Above zero but meaningless (a latency of 1e-300 ms, a success rate of 1e-300): each
    number has a floor that says what the field can mean."""
    for doc, path in [("Experiment/canary", ("spec", "canary", "maxP95LatencyMs")),
                      ("Experiment/port", ("spec", "portValidation", "minAccuracy")),
                      ("Experiment/port", ("spec", "portValidation", "requestTimeoutSeconds")),
                      ("StreamSet/streams", ("spec", "readiness", "maxFrameAgeSeconds"))]:
        found = refusals(changed(doc, path, 1e-300))
        assert [f for f, _, _ in found] == [".".join(path)], (path, found)


def test_a_first_item_that_shows_what_the_control_asks_for_is_refused() -> None:
    facts = ("spec", "portValidation", "media", 0, "facts")
    found = refusals(changed("Experiment/port", facts, ["a yellow school bus"]))
    assert [(f, r) for f, r, _ in found] == [("spec.portValidation.media.0.facts.0", R_PORT)]


def test_a_chain_that_runs_into_a_loop_flags_only_the_runs_on_the_loop() -> None:
    docs = [_bench("a", "run-a", "run-b", evs=True, port=18601),
            _bench("b", "run-b", "run-c", evs=False, port=18602),
            _bench("c", "run-c", "run-b", evs=True, port=18603)]
    found = refusals(_with_docs(*docs))
    lines = sorted(line for f, r, line in found if (f, r) == ("spec.benchmark.pairWith", R_BENCH))
    assert len(lines) == 2  # b and c loop; a only leads into the loop
