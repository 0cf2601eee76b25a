"""What each kind records about itself: typed facts models, forgiving when read, and found
for ``status NAME`` through the kind's declaration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from controllers.kinds.deployment.facts import DeploymentStatusFacts, RuntimeFacts
from controllers.kinds.experiments.facts import FrozenRun
from controllers.kinds.host.facts import HostStatusFacts
from controllers.kinds.streamset.facts import SourceFacts, StreamSetStatusFacts
from specs.facts import GpuInfo
from state.models import ResourceStatus


def _record(kind: str = "Deployment", facts: object = None) -> ResourceStatus:
    st = ResourceStatus(resource=f"{kind}/x", kind=kind, name="x")
    if facts is not None:
        st.facts = facts  # type: ignore[assignment]  # what a hand-edited file may hold
    return st


def test_deployment_facts_round_trip_with_the_keys_status_shows() -> None:
    st = _record()
    known = DeploymentStatusFacts.of(st)
    known.host, known.container_id, known.model = "local", "abc123", "m"
    known.runtime = RuntimeFacts.model_validate({"max_model_len": "4096", "mode": "eager"})
    known.put(st)
    assert st.facts == {"host": "local", "containerId": "abc123", "model": "m",
                        "runtime": {"max_model_len": "4096", "mode": "eager"}}
    assert DeploymentStatusFacts.of(ResourceStatus.model_validate_json(
        st.model_dump_json())) == known


def test_assignment_is_validated() -> None:
    known = DeploymentStatusFacts()
    with pytest.raises(ValidationError):
        known.container_id = ["not", "a", "string"]  # type: ignore[assignment]


def test_unknown_or_mistyped_keys_are_dropped_and_the_rest_kept() -> None:
    st = _record(facts={"host": "edge", "containerId": 5, "retiredKey": "x",
                        "readySince": "2026-12-01T00:00:00Z"})
    known = DeploymentStatusFacts.of(st)
    assert known.host == "edge"
    assert known.ready_since == "2026-12-01T00:00:00Z"
    assert known.container_id is None


@pytest.mark.parametrize("raw", [[1, 2], "text", None, {"sources": "nope"}])
def test_facts_that_are_not_an_object_read_as_none_known(raw: object) -> None:
    known = StreamSetStatusFacts.of(_record("StreamSet", raw))
    assert known.sources == {}
    assert known.deployment is None


def test_one_bad_source_loses_only_its_bad_fact() -> None:
    st = _record("StreamSet", {"deployment": "vlm", "maxFrameAgeSeconds": 15, "sources": {
        "cam1": {"hash": "h1", "registered": "maybe?", "lastFrameAt": "t"},
        "cam2": {"hash": "h2", "registered": True},
        "cam3": ["garbage"]}})
    known = StreamSetStatusFacts.of(st)
    assert known.deployment == "vlm"
    assert known.max_frame_age_seconds == 15
    assert known.sources["cam1"].hash == "h1"
    assert known.sources["cam1"].registered is None
    assert known.sources["cam1"].last_frame_at == "t"
    assert known.sources["cam2"].registered is True
    assert known.sources["cam3"] == SourceFacts()


def test_host_gpus_keep_their_shape() -> None:
    gpu = GpuInfo(index=0, uuid="GPU-1", name="H200", compute_capability="9.0",
                  memory_total_mib=143771)
    st = _record("Host")
    HostStatusFacts(docker="unix:///var/run/docker.sock", reachable=True, gpus=[gpu]).put(st)
    assert st.facts["gpus"] == [{"index": 0, "uuid": "GPU-1", "name": "H200",
                                 "compute_capability": "9.0", "memory_total_mib": 143771}]
    assert HostStatusFacts.of(st).gpus == [gpu]
    HostStatusFacts(reachable=True, gpus="none").put(st)
    assert HostStatusFacts.of(st).gpus == "none"
    json.dumps(st.facts)  # plain JSON, nothing pydantic left in it


def test_merging_source_facts_keeps_what_the_new_ones_do_not_say() -> None:
    old = SourceFacts(origin="rtsp://127.0.0.1:1/a", hash="h", last_caption="old")
    new = SourceFacts(frames_fresh=True, last_caption=None)
    merged = old.merged(new)
    assert merged.origin == "rtsp://127.0.0.1:1/a"
    assert merged.hash == "h"
    assert merged.frames_fresh is True
    assert merged.last_caption is None


def test_a_kind_declares_its_facts_and_status_imports_only_the_one_it_shows() -> None:
    """``status NAME`` finds a record's facts model through its kind's declaration, without
    loading every kind (the registry costs ~0.5 s of imports)."""
    probe = ("import sys\n"
             "from controllers.facts import Facts\n"
             "from reconciler.output import detail_rows\n"
             "found = Facts.for_kind('StreamSet')\n"
             "print(found.__module__, found.__name__, Facts.for_kind('Source'),"
             " Facts.for_kind('Nope'))\n"
             "print(sorted(m for m in sys.modules if m.startswith('controllers.')"
             " and m.rsplit('.', 1)[-1] in ('kind', 'facts')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    first, loaded = out.stdout.splitlines()
    assert first == "controllers.kinds.streamset.facts StreamSetStatusFacts None None"
    assert loaded == "['controllers.facts', 'controllers.kinds.streamset.facts']"


def test_a_runs_frozen_spec_is_read_leniently_with_defaults_for_what_it_lacks() -> None:
    record = ResourceStatus(resource="Experiment/e", kind="Experiment", name="e")
    assert FrozenRun.frozen(None) == FrozenRun.frozen(record) == FrozenRun()
    record.applied_spec = {"experiment": {"executor": "host", "budgetSeconds": 900,
                                          "cleanupSeconds": "soon", "canary": {"streams": 2},
                                          "telemetry": {"dcgmUrl": "http://127.0.0.1:9400"}}}
    frozen = FrozenRun.frozen(record)
    assert (frozen.executor, frozen.budget_seconds, frozen.cleanup_seconds) == ("host", 900, 300)
    assert frozen.telemetry == {"dcgmUrl": "http://127.0.0.1:9400"}
    record.applied_spec = {"experiment": ["not", "a", "mapping"]}
    assert FrozenRun.frozen(record) == FrozenRun()


def test_a_host_reports_only_the_gpus_its_driver_sees_once_each() -> None:
    from specs.facts import HostFacts

    gpus = [GpuInfo(index=i, uuid=f"GPU-{i}", name="H200", compute_capability="9.0",
                    memory_total_mib=143771) for i in range(2)]
    facts = HostFacts(name="edge", engine_version="26", api_version="1.45", gpus=gpus)
    # By index or UUID; an emulated GPU the driver does not report is never asked for.
    assert facts.reported([1, "GPU-1", "GPU-emulated", "GPU-0"]) == ("GPU-1", "GPU-0")
    assert HostFacts(name="ci", engine_version="26", api_version="1.45").reported(
        ["GPU-0"]) == ()
