"""The Experiment spec and its pure rules (the performance contract and the canary)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from specs.errors import SpecError
from specs.experiment import Experiment, check_experiment, check_template, measure_warnings
from specs.experiments.base import R_CONTRACT
from specs.experiments.benchmark import R_BENCH
from specs.experiments.canary import CanaryExperimentSpec, solid_labels
from specs.experiments.capacity import R_CAPACITY
from specs.experiments.portvalidation import R_PORT
from specs.models import Deployment
from specs.trust import read_paths
from specs.validate import parse_text

DIGEST = "ab" * 32


def _experiment(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "canary", "runId": "canary-4-001", "template": "vlm",
                            "service": {"hostPort": 18100},
                            "measurement": {"claim": "4 streams under p95 2 s"},
                            "canary": {"streams": 4}}
    body.update(spec)
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
            "metadata": {"name": "canary"}, "spec": body}


def _rules(**spec: Any) -> list[tuple[str, str]]:
    exp = Experiment.model_validate(_experiment(**spec))
    return [(".".join(map(str, f.path)), f.rule) for f in check_experiment(exp)]


def _template(profile: str = "standard", port: int = 18000) -> Deployment:
    return Deployment.model_validate({
        "apiVersion": "rtvi.reconciler/v1", "kind": "Deployment", "metadata": {"name": "vlm"},
        "spec": {"host": "local", "profile": profile, "image": f"rtvi@sha256:{DIGEST}",
                 "model": {"path": "ngc:nim/nvidia/m:1", "use": "vllm-compatible"},
                 "port": {"host": port}}})


def test_a_plain_four_stream_canary_is_valid() -> None:
    assert _rules() == []
    exp = Experiment.model_validate(_experiment())
    assert isinstance(exp.spec, CanaryExperimentSpec)
    assert exp.spec.canary.semanticIsolation is True
    assert exp.spec.measurement.metrics == ["chunk_latency_ms", "dropped_chunks"]
    assert check_template(exp, _template()) == []


@pytest.mark.parametrize("streams", [3, 5, 64, 0])
def test_canary_stream_counts_are_the_contract_s(streams: int) -> None:
    with pytest.raises(ValidationError):
        Experiment.model_validate(_experiment(canary={"streams": streams}))


def test_32_synthetic_streams_are_refused_and_pinned_media_accepted() -> None:
    assert ("spec.canary.streams", "Experiment rule: canary") in _rules(canary={"streams": 32})
    media = [{"label": f"object{i}", "path": f"/media/{i}.png", "sha256": DIGEST}
             for i in range(32)]
    assert _rules(canary={"streams": 32, "media": media}) == []


def test_media_must_match_the_streams_and_labels_must_tell_sources_apart() -> None:
    one = [{"label": "cat", "path": "/m/cat.png", "sha256": DIGEST}]
    assert ("spec.canary.media", "Experiment rule: canary") in _rules(
        canary={"streams": 2, "media": one})
    clash = [{"label": "cat", "path": "/m/a.png", "sha256": DIGEST},
             {"label": "black cat", "path": "/m/b.png", "sha256": DIGEST}]
    assert ("spec.canary.media.0.label", "Experiment rule: canary") in _rules(
        canary={"streams": 2, "media": clash})
    with pytest.raises(ValidationError):  # a label a caption can say: lowercase words
        Experiment.model_validate(_experiment(canary={"streams": 1, "media": [
            {"label": "Cat!", "path": "/m/a.png", "sha256": DIGEST}]}))


def test_isolation_needs_two_streams_and_qualification_needs_isolation() -> None:
    assert ("spec.canary.semanticIsolation", "Experiment rule: canary") in _rules(
        canary={"streams": 1})
    assert ("spec.canary.qualificationOnly", "Experiment rule: canary") in _rules(
        canary={"streams": 2, "semanticIsolation": False, "qualificationOnly": True})


def test_workload_shape_follows_the_load_unit() -> None:
    found = _rules(workload={"loadUnit": "independent_live_stream",
                             "sourceIdentityPolicy": "shared_across_requests",
                             "sessionReuse": True, "sourceIdentityCount": 2})
    assert {p for p, _ in found} >= {"spec.workload.sourceIdentityPolicy",
                                     "spec.workload.sessionReuse",
                                     "spec.workload.sourceIdentityCount"}
    assert ("spec.workload.loadUnit", "Experiment rule: canary") in _rules(workload={
        "loadUnit": "shared_stream_subscriber", "sourceIdentityPolicy": "shared_across_requests",
        "sessionReuse": True})
    assert ("spec.workload.sourceIdentityPolicy", "Experiment rule: performance contract") in (
        _rules(workload={"loadUnit": "file_request"}))


@pytest.mark.parametrize(("paths", "bad"), [
    ({"output": "out", "scratch": "out"}, "spec.paths.scratch"),
    ({"output": "out", "scratch": "out/tmp"}, "spec.paths.scratch"),
    ({"output": "/tmp/out"}, "spec.paths.output"),
    ({"output": "../elsewhere"}, "spec.paths.output"),
    ({"mutableCache": "."}, "spec.paths.mutableCache"),
])
def test_run_paths_are_distinct_and_inside_the_run_folder(paths: dict[str, str],
                                                         bad: str) -> None:
    assert (bad, "Experiment rule: isolated paths") in _rules(paths=paths)


@pytest.mark.parametrize("run_id", ["ab", "Canary", "x/y", "../up", "-lead"])
def test_run_ids_are_safe_folder_names(run_id: str) -> None:
    with pytest.raises(ValidationError):
        Experiment.model_validate(_experiment(runId=run_id))


def test_measurement_needs_a_claim_and_metrics() -> None:
    with pytest.raises(ValidationError):
        Experiment.model_validate(_experiment(measurement={"claim": ""}))
    with pytest.raises(ValidationError):
        Experiment.model_validate(_experiment(measurement={"claim": "c", "metrics": []}))


def test_template_rules() -> None:
    exp = Experiment.model_validate(_experiment(measurement={"claim": "c", "published": True}))
    rules = {".".join(map(str, f.path)) for f in check_template(exp, _template(port=18100))}
    assert rules == {"spec.measurement.published", "spec.service.hostPort"}
    assert check_template(exp, _template(profile="perf")) == []
    [missing] = check_template(exp, None)
    assert missing.path == ("spec", "template")
    assert "not defined" in missing.message


def test_probe_labels_are_distinct_and_none_contains_another() -> None:
    for streams in (2, 4, 8, 16):
        labels = solid_labels(streams)
        assert len(labels) == len(set(labels)) == streams
        for label in labels:
            words = set(label.split())
            assert not any(o != label and set(o.split()) >= words for o in labels), label


def test_two_or_more_streams_need_isolation_and_three_answers_each() -> None:
    assert ("spec.canary.semanticIsolation", "Experiment rule: canary") in _rules(
        canary={"streams": 4, "semanticIsolation": False})
    assert _rules(canary={"streams": 1, "semanticIsolation": False}) == []
    with pytest.raises(ValidationError, match="answersPerSource"):
        Experiment.model_validate(_experiment(canary={"streams": 4, "answersPerSource": 1}))


def test_a_run_of_thirty_minutes_or_more_smokes_first() -> None:

    long = {"streams": 4, "performanceSeconds": 1800}
    assert ("spec.canary.smoke", "Experiment rule: performance contract") in _rules(
        canary={**long, "smoke": False}, budgetSeconds=3600)
    assert Experiment.model_validate(_experiment(canary=long)).spec.smokes()
    assert not Experiment.model_validate(_experiment()).spec.smokes()


def test_the_budget_must_hold_the_cleanup_and_a_run() -> None:
    assert ("spec.budgetSeconds", "Experiment rule: performance contract") in _rules(
        budgetSeconds=120, cleanupSeconds=300)
    assert _rules(budgetSeconds=360, cleanupSeconds=300) == []


def test_a_run_may_name_its_own_gpus_and_env() -> None:
    from specs.experiment import run_deployment

    exp = Experiment.model_validate(_experiment(service={
        "hostPort": 18100, "env": {"PORT": 18100}, "gpus": [1]}))
    run = run_deployment(_template(), exp.spec)
    assert (run.spec.gpus, run.spec.env["PORT"], run.spec.port.host) == ([1], "18100", 18100)
    with pytest.raises(ValidationError, match="invalid environment variable name"):
        Experiment.model_validate(_experiment(service={"hostPort": 18100, "env": {"A B": 1}}))


def test_two_experiments_may_not_share_a_port_or_a_run_id() -> None:
    from specs.crossref import check_set
    from specs.validate import build_spec_set  # noqa: F401  (the table of kinds is complete)

    first = Experiment.model_validate(_experiment())
    second = Experiment.model_validate({**_experiment(), "metadata": {"name": "other"}})
    rules = {(".".join(map(str, f.path)), f.message.split(":")[0])
             for _, f in check_set([_template(), first, second])}
    assert ("spec.service.hostPort", "port 18100 is also Experiment canary's on Host local") in (
        rules)
    assert any(path == "spec.runId" for path, _ in rules), rules


def test_a_content_addressed_cache_policy_needs_read_only_mounts() -> None:
    def template(read_only: bool) -> Deployment:
        data = _template().model_dump(mode="json")
        data["spec"]["mounts"] = [{"source": "/cache", "target": "/cache",
                                   "readOnly": read_only}]
        return Deployment.model_validate(data)
    exp = Experiment.model_validate(_experiment(cachePolicy="content-addressed-read-only"))
    assert [f.path for f in check_template(exp, template(False))] == [("spec", "cachePolicy")]
    assert check_template(exp, template(True)) == []


HARNESS_SEARCH = {"harness": {"argv": ["python3", "perf/benchmark/rtvi_perf_benchmark.py"],
                              "workdir": "/opt/vss/services/rtvi/rt-vlm",
                              "config": "perf/benchmark/rtvi_vlm_bcd_3_3_h100_sxm_config.yaml"},
                  "scenario": "max_live_streams_1_token"}


def test_a_capacity_search_can_be_handed_to_the_harness() -> None:
    assert _rules(budgetSeconds=900, **_capacity(harness=HARNESS_SEARCH)) == []
    with pytest.raises(ValidationError):
        Experiment.model_validate(_experiment(**_capacity(
            harness={**HARNESS_SEARCH, "scenario": "two words"})))


def _capacity(**search: Any) -> dict[str, Any]:
    return {"type": "capacity", "canary": None,
            "capacity": {"initialStreamCount": 4, "maxStreamCount": 32,
                         "maxP95LatencyMs": 2000, **search}}


def test_a_capacity_search_is_valid_and_offers_its_maximum_at_most() -> None:
    assert _rules(**_capacity()) == []
    exp = Experiment.model_validate(_experiment(**_capacity()))
    assert exp.spec.largest_level() == 32
    assert exp.spec.smokes() is True  # the default budget is 30 minutes: smoke first
    short = Experiment.model_validate(_experiment(budgetSeconds=900, **_capacity()))
    assert short.spec.smokes() is False  # under 30 minutes: only when asked for


@pytest.mark.parametrize(("spec", "path", "rule"), [
    (_capacity(initialStreamCount=40), "spec.capacity.initialStreamCount", R_CAPACITY),
    ({**_capacity(), "measurement": {"claim": "c", "repetitions": 3}},
     "spec.measurement.repetitions", R_CAPACITY),
    ({**_capacity(), "measurement": {"claim": "c", "warmupRuns": 1}},
     "spec.measurement.repetitions", R_CAPACITY),
    ({**_capacity(), "workload": {"loadUnit": "file_request",
                                  "sourceIdentityPolicy": "not_applicable"}},
     "spec.workload.loadUnit", R_CAPACITY),
    ({**_capacity(smoke=False), "budgetSeconds": 3600}, "spec.capacity.smoke", R_CONTRACT),
    ({**_capacity(), "workload": {"sourceIdentityCount": 8}},
     "spec.workload.sourceIdentityCount", R_CONTRACT),
    ({**_capacity(serviceReuse=True, harness=HARNESS_SEARCH), "budgetSeconds": 900},
     "spec.capacity.serviceReuse", R_CAPACITY),
    (_capacity(harness=HARNESS_SEARCH), "spec.capacity.harness.smokeClip", R_CONTRACT),
])
def test_capacity_rules_name_the_field(spec: dict[str, Any], path: str, rule: str) -> None:
    assert (path, rule) in _rules(**spec)


def _schema_errors(spec: dict[str, Any]) -> list[str]:
    """What ``validate`` says of the Experiment as a file: ``file:line:col: field: message
    (rule)``."""
    text = yaml.safe_dump(_experiment(**spec), sort_keys=False)
    with pytest.raises(SpecError) as info:
        parse_text(text, "specs/x.yaml")
    return [str(i) for i in info.value.issues]


@pytest.mark.parametrize(("spec", "expected"), [
    ({"type": "capacity"},  # the canary block, not its own
     "specs/x.yaml:5:1: spec.capacity: a capacity Experiment needs its capacity block"),
    ({"type": "canary", "capacity": _capacity()["capacity"]},
     "specs/x.yaml:15:3: spec.capacity: a capacity block in a canary Experiment: it would not "
     "run (remove it, or set type: capacity)"),
    ({**_capacity(), "canary": {"streams": 4}},
     "specs/x.yaml:13:3: spec.canary: a canary block in a capacity Experiment"),
    ({"type": "capacity", "canary": None, "capacity": {"initialStreamCount": 0}},
     "specs/x.yaml:15:5: spec.capacity.initialStreamCount: Input should be greater than or "
     "equal to 1 (schema)"),  # the type's own block, its own field, no tag in the path
    ({"type": "canary", "canary": {"streams": 3}},
     "specs/x.yaml:14:5: spec.canary.streams: Input should be 1, 2, 4, 8, 16 or 32 (schema)"),
    ({"type": "bogus"}, "specs/x.yaml:6:3: spec.type: must be one of canary, capacity, "
     "portValidation, benchmark, promotion (schema)"),
    ({"type": None}, "specs/x.yaml:6:3: spec.type: must be one of canary, capacity, "
     "portValidation, benchmark, promotion (schema)"),
])
def test_the_type_chooses_the_block_and_an_error_names_the_real_path(
        spec: dict[str, Any], expected: str) -> None:
    errors = _schema_errors(spec)
    assert any(e.startswith(expected) for e in errors), errors


def test_a_missing_type_or_a_spec_that_is_no_mapping_is_named_not_a_traceback() -> None:
    body = _experiment()["spec"]
    del body["type"]
    text = yaml.safe_dump({**_experiment(), "spec": body}, sort_keys=False)
    with pytest.raises(SpecError) as info:
        parse_text(text, "specs/x.yaml")
    assert [str(i) for i in info.value.issues] == [
        "specs/x.yaml:5:1: spec.type: required field is missing: it must be one of canary, "
        "capacity, portValidation, benchmark, promotion (schema)"]
    text = yaml.safe_dump({**_experiment(), "spec": "canary"}, sort_keys=False)
    with pytest.raises(SpecError) as info:
        parse_text(text, "specs/x.yaml")
    assert [str(i) for i in info.value.issues] == [
        "specs/x.yaml:5:1: spec: must be a mapping whose type must be one of canary, capacity, "
        "portValidation, benchmark, promotion (schema)"]


def test_a_type_field_outside_the_experiment_union_is_no_tag() -> None:
    """Only the member a ``type`` chose is left out of a path: a Deployment with a stray
    ``type: port`` still names ``spec.port.host``."""
    text = (f"apiVersion: rtvi.reconciler/v1\nkind: Deployment\nmetadata: {{name: vlm}}\n"
            f"spec:\n  type: port\n  host: local\n  image: rtvi@sha256:{DIGEST}\n"
            f"  model: {{path: 'ngc:nim/nvidia/m:1', use: vllm-compatible}}\n"
            f"  port: {{host: x}}\n")
    with pytest.raises(SpecError) as info:
        parse_text(text, "specs/d.yaml")
    assert [str(i) for i in info.value.issues] == [
        "specs/d.yaml:5:3: spec.type: unknown field (schema)",
        "specs/d.yaml:9:10: spec.port.host: Input should be a valid integer (schema)"]


def test_a_capacity_block_needs_its_bounds_and_latency_criterion() -> None:
    for missing in ("initialStreamCount", "maxStreamCount", "maxP95LatencyMs"):
        body = _capacity()
        del body["capacity"][missing]
        with pytest.raises(ValidationError, match=missing):
            Experiment.model_validate(_experiment(**body))


REV = "ab" * 20


def _port(**port: Any) -> dict[str, Any]:
    body = {"integration": {"path": "configuration"},
            "model": {"source": "hf:org/m", "revision": REV, "processor": "p", "tokenizer": "t",
                      "quantization": "bf16", "contextLength": 4096, "frameSampling": "8"},
            "modalities": ["text", "image"],
            "media": [{"path": "/m/red.png", "sha256": DIGEST, "mediaType": "image",
                       "facts": ["red"]}], **port}
    return {"type": "portValidation", "canary": None, "portValidation": body}


def test_a_port_validation_is_valid() -> None:
    assert _rules(**_port()) == []


@pytest.mark.parametrize(("port", "path"), [
    ({"integration": {"path": "patch"}}, "spec.portValidation.integration.reason"),
    ({"modalities": ["text", "video"]}, "spec.portValidation.media"),  # video claimed, no clip
    ({"modalities": ["text"]}, "spec.portValidation.modalities"),  # an image not claimed
    ({"modalities": ["text", "text", "image"]}, "spec.portValidation.modalities"),
    ({"modalities": ["text"], "media": []}, "spec.portValidation.media"),  # no labelled set
    ({"media": [{"path": "/m/r.png", "sha256": DIGEST, "mediaType": "image", "facts": ["Red"],
                 "absent": ["red"]}]}, "spec.portValidation.media.0.absent.0"),
    ({"media": [{"path": "/m/r.png", "sha256": DIGEST, "mediaType": "image",
                 "facts": ["red car"], "absent": ["bus", "Car!"]}]},
     "spec.portValidation.media.0.absent.1"),  # inside the fact as the gate reads words
    ({"textChecks": [{"prompt": "Name it.", "facts": ["red"], "absent": ["red"]}]},
     "spec.portValidation.textChecks.0.absent.0"),
])
def test_port_validation_rules_name_the_field(port: dict[str, Any], path: str) -> None:
    assert (path, R_PORT) in _rules(**_port(**port))


@pytest.mark.parametrize("revision", ["main", "v1.2", "ab" * 19, "sha256:" + "a" * 63])
def test_a_moving_or_malformed_model_revision_is_refused(revision: str) -> None:
    body = _port()
    body["portValidation"]["model"]["revision"] = revision
    with pytest.raises(ValidationError, match="revision"):
        Experiment.model_validate(_experiment(**body))


def _bench(**bench: Any) -> dict[str, Any]:
    body = {"harness": {"argv": ["python3", "perf/benchmark/rtvi_perf_benchmark.py"],
                        "workdir": "/opt/vss", "config": "perf/benchmark/cfg.yaml"},
            "scenario": "file_burst_1_token_2k", "mode": "file_burst", **bench}
    return {"type": "benchmark", "canary": None, "benchmark": body, "budgetSeconds": 900}


def test_a_benchmark_is_valid() -> None:
    assert _rules(**_bench()) == []


@pytest.mark.parametrize(("spec", "path", "rule"), [
    (_bench(pairWith="canary-4-001"), "spec.benchmark.pairWith", R_BENCH),  # itself
    (_bench(mode="max_live_streams", concurrencyLevels=[1, 2]),
     "spec.benchmark.concurrencyLevels", R_BENCH),
    (_bench(mode="single_live_stream", concurrencyLevels=[1]),
     "spec.benchmark.concurrencyLevels", R_BENCH),
    (_bench(initialStreamCount=144), "spec.benchmark.initialStreamCount", R_BENCH),
    (_bench(binarySearchRefinement=False), "spec.benchmark.initialStreamCount", R_BENCH),
    (_bench(smoke=True), "spec.benchmark.smokeClip", R_CONTRACT),
    ({**_bench(), "budgetSeconds": 3600}, "spec.benchmark.smokeClip", R_CONTRACT),
    ({**_bench(smoke=False), "budgetSeconds": 3600}, "spec.benchmark.smoke", R_CONTRACT),
])
def test_benchmark_rules_name_the_field(spec: dict[str, Any], path: str, rule: str) -> None:
    assert (path, rule) in _rules(**spec)


@pytest.mark.parametrize("change", [{"mode": "burst"}, {"mode": "file-burst"},
                                    {"scenario": "two words"},
                                    {"harness": {"argv": [], "workdir": "/x", "config": "c"}},
                                    {"harness": {"argv": ["h"], "workdir": "rel", "config": "c"}},
                                    {"apiMode": "completions"},
                                    {"harness": {"argv": ["h"], "workdir": "/x", "config": "c",
                                                 "env": {"RTVI_BACKEND": "http://x/v1"}}},
                                    {"harness": {"argv": ["h"], "workdir": "/x", "config": "c",
                                                 "resultFile": "results.json"}}])
def test_a_benchmark_block_is_strict(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Experiment.model_validate(_experiment(**_bench(**change)))


def test_latency_is_measured_the_harness_way_by_default_and_plan_warns_of_the_server_view(
        ) -> None:
    default = Experiment.model_validate(_experiment())
    assert default.spec.measurement.latencySource == "ntp_timestamp"
    assert measure_warnings(default.spec, {}) == []
    server = Experiment.model_validate(_experiment(measurement={
        "claim": "c", "latencySource": "processing_latency"}))
    [warning] = measure_warnings(server.spec, {})
    assert "ENABLE_REQUEST_PROFILING=true" in warning
    assert "not measured" in warning
    assert measure_warnings(server.spec, {"ENABLE_REQUEST_PROFILING": "true"}) == []
    with pytest.raises(ValidationError):
        Experiment.model_validate(_experiment(measurement={"claim": "c",
                                                           "latencySource": "server"}))


@pytest.mark.parametrize("spec", [{}, _capacity(),
                                  {**_capacity(harness=HARNESS_SEARCH), "budgetSeconds": 900},
                                  _port(), _bench()])
def test_every_type_may_execute_as_a_job_on_its_host(spec: dict[str, Any]) -> None:
    exp = Experiment.model_validate(_experiment(**spec, executor="host"))
    assert exp.spec.executor == "host"
    assert check_experiment(exp) == check_experiment(
        Experiment.model_validate(_experiment(**spec)))


def test_a_job_reads_on_its_host_the_media_and_harness_files_its_spec_names() -> None:
    port = Experiment.model_validate(_experiment(**_port(), executor="host"))
    assert read_paths(port.spec, ("media", "harness")) == ["/m/red.png"]
    bench = Experiment.model_validate(_experiment(**_bench(
        smoke=True, smokeClip={"path": "/m/clip.mp4", "sha256": DIGEST}, pairWith="other")))
    assert sorted(read_paths(bench.spec, ("media", "harness"))) == [
        "/m/clip.mp4", "/opt/vss", "/opt/vss/perf/benchmark/cfg.yaml"]  # config: in workdir
    assert read_paths(bench.spec, ("secrets",)) == []
    assert bench.spec.read_runs() == ["other"]  # the EVS pair's other side
    assert port.spec.read_runs() == []
