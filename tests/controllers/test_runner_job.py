"""The job's frozen plan and the runner's refusals, without an engine: what goes into
``plan.json`` (never a secret's value), how the secrets arrive, and what the job refuses."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import threading
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from controllers.kinds.deployment.plan import Desired
from controllers.kinds.experiments.benchmark.runtype import trusted_config
from controllers.kinds.experiments.harnessproc import HarnessError
from controllers.kinds.experiments.run import RunPlan
from controllers.kinds.experiments.runner import job as jobs
from specs.experiment import ExperimentSpec
from specs.models import Deployment
from specs.trust import enforce, enforced, policy
from state.keys import Key
from state.models import Owner
from tests.controllers.test_harnessproc import config_naming
from tests.specs_factory import deployment

CANARY = "canary-secret-value-7f3a"


def _plan(tmp_path: Path) -> RunPlan:
    secret = tmp_path / "token"
    secret.write_text(CANARY)
    template = Deployment.model_validate(deployment(
        "vlm", "rtvi-emulator@sha256:" + "a" * 64, 8000,
        secrets=[{"name": "API_TOKEN", "fromFile": str(secret)}]))
    spec = TypeAdapter(ExperimentSpec).validate_python({
        "type": "canary", "runId": "job-7", "template": "vlm", "executor": "host",
        "service": {"hostPort": 9000}, "measurement": {"claim": "isolated"},
        "canary": {"streams": 2}})
    key = Key("Experiment", "canary")
    desired = Desired(deployment=template, resource=key, spec_hash="h", container_name="c",
                      image_id="sha256:" + "a" * 64, env={"A": "1"}, labels={"l": "v"},
                      url="http://127.0.0.1:9000", probe_url="http://127.0.0.1:45000",
                      source_file="specs.yaml")
    return RunPlan(resource=key, name="canary", spec=spec, run_hash="r", template=template,
                   desired=desired, host="local", gpu_ids=["GPU-1"], evidence_root=tmp_path,
                   source_file="specs.yaml", revision="rev", other_gpus=("GPU-2",))


def test_the_frozen_plan_names_secrets_and_thaws_to_the_same_run(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    frozen = jobs.freeze(plan, Owner("team", "0123abcd"), "sha256:pub")
    text = frozen.model_dump_json()
    assert CANARY not in text
    assert frozen.secrets == ["API_TOKEN"]
    assert (frozen.instance, frozen.owner_id, frozen.publisher_image) == (
        "team", "0123abcd", "sha256:pub")
    thawed = jobs.thaw(jobs.JobPlan.model_validate_json(text), tmp_path / "evidence")
    assert thawed.spec == plan.spec
    assert (thawed.resource, thawed.run_hash, thawed.gpu_ids, thawed.other_gpus) == (
        plan.resource, plan.run_hash, plan.gpu_ids, plan.other_gpus)
    # On the Host the service is reached at the URL the Host sees; no tunnel there.
    assert thawed.desired.probe_url == plan.desired.url
    # The manifest names the reconciler's code: the runner's image holds no checkout.
    assert thawed.code is not None
    assert thawed.code.revision == frozen.code_revision != "unknown"
    (ref,) = thawed.desired.deployment.spec.secrets
    assert (ref.name, ref.fromFile, ref.fromEnv) == ("API_TOKEN", None,
                                                     jobs.SECRET_ENV_PREFIX + "API_TOKEN")


def test_secrets_arrive_on_one_line_of_stdin_and_a_missing_one_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = jobs.freeze(_plan(tmp_path), Owner("default", "0" * 32))
    monkeypatch.delenv(jobs.SECRET_ENV_PREFIX + "API_TOKEN", raising=False)
    jobs.take_secrets(frozen, io.StringIO(json.dumps({"API_TOKEN": CANARY}) + "\n{"))
    assert os.environ[jobs.SECRET_ENV_PREFIX + "API_TOKEN"] == CANARY
    for bad, why in (("{}\n", "no value on stdin for secret(s) API_TOKEN"),
                     ("[1]\n", "not one JSON object"), ("{\n", "not one JSON object")):
        with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")) as e:
            jobs.take_secrets(frozen, io.StringIO(bad))
        assert CANARY not in str(e.value)


def test_a_companion_service_is_frozen_with_its_own_secrets_apart_from_the_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A promotion's copy of the running version travels in the plan beside the run's own
    service; its secret of the same name is another value, given and read apart."""
    plan = _plan(tmp_path)
    old = tmp_path / "old-token"
    old.write_text(CANARY + "-old")
    running = Deployment.model_validate(deployment(
        "vlm", "rtvi-emulator@sha256:" + "b" * 64, 9000,
        secrets=[{"name": "API_TOKEN", "fromFile": str(old)}]))
    companion = dataclasses.replace(plan.desired, deployment=running, container_name="c-base",
                                    image_id="sha256:" + "b" * 64)
    plan = dataclasses.replace(plan, companions=(("baseline", companion),))
    frozen = jobs.freeze(plan, Owner("team", "0123abcd"))
    text = frozen.model_dump_json()
    assert CANARY not in text
    values = jobs.secret_values(plan)
    assert values == {"API_TOKEN": CANARY, "baseline/API_TOKEN": CANARY + "-old"}
    for variable in ("API_TOKEN", "baseline__API_TOKEN"):
        monkeypatch.delenv(jobs.SECRET_ENV_PREFIX + variable, raising=False)
    with pytest.raises(ValueError, match=r"no value on stdin for secret\(s\) baseline/API_TOKEN"):
        jobs.take_secrets(frozen, io.StringIO(json.dumps({"API_TOKEN": CANARY}) + "\n"))
    jobs.take_secrets(frozen, io.StringIO(json.dumps(values) + "\n"))
    thawed = jobs.thaw(jobs.JobPlan.model_validate_json(text), tmp_path / "evidence")
    ((name, base),) = thawed.companions
    assert (name, base.container_name, base.image_id) == ("baseline", "c-base",
                                                          "sha256:" + "b" * 64)
    assert base.deployment.spec.image == running.spec.image
    (ref,) = base.deployment.spec.secrets
    assert os.environ[ref.fromEnv or ""] == CANARY + "-old"
    (own,) = thawed.desired.deployment.spec.secrets
    assert os.environ[own.fromEnv or ""] == CANARY


def test_an_unusable_plan_or_a_spent_run_id_starts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jobs.SECRET_ENV_PREFIX + "API_TOKEN", raising=False)  # restored after
    stop = threading.Event()
    assert jobs.run_job(tmp_path, io.StringIO(""), stop) == jobs.EXIT_UNUSABLE  # no plan.json
    (tmp_path / jobs.PLAN_FILE).write_text('{"instance": 1}')
    assert jobs.run_job(tmp_path, io.StringIO(""), stop) == jobs.EXIT_UNUSABLE
    frozen = jobs.freeze(_plan(tmp_path), Owner("default", "0" * 32))
    (tmp_path / jobs.PLAN_FILE).write_text(frozen.model_dump_json())
    assert jobs.run_job(tmp_path, io.StringIO("{}\n"), stop) == jobs.EXIT_UNUSABLE  # no secret
    (tmp_path / jobs.EVIDENCE_DIR / "job-7").mkdir(parents=True)
    line = json.dumps({"API_TOKEN": CANARY}) + "\n"
    assert jobs.run_job(tmp_path, io.StringIO(line), stop) == jobs.EXIT_RAN_BEFORE
    assert not (tmp_path / jobs.STATE_DIR).exists()  # no record: nothing was started


def test_the_runner_reads_the_gpus_its_host_reports_and_only_without_a_dcgm_exporter(
        tmp_path: Path) -> None:
    from dataclasses import replace

    from controllers.kinds.experiments.runner import hostjob

    plan = replace(_plan(tmp_path), host_gpus=("GPU-1",))
    req = hostjob.runner_request(plan, "run-job-7", "sha256:img", {}, "/run/docker.sock")
    # Telemetry is read in the job (NVML or nvidia-smi there): the GPU the Host's driver
    # reports is given to read its counters only; an unreported one ("GPU-2") is not asked.
    assert (req.gpu_ids, req.gpu_capabilities) == (["GPU-1"], ("gpu", "utility"))
    assert ("/run/docker.sock", "/var/run/docker.sock", False) in req.mounts
    dcgm = plan.spec.model_copy(update={"telemetry": plan.spec.telemetry.model_copy(
        update={"dcgmUrl": "http://127.0.0.1:9400/metrics"})})
    req = hostjob.runner_request(replace(plan, spec=dcgm), "run-job-7", "sha256:img", {},
                                 "/run/docker.sock")
    assert req.gpu_ids == []  # the exporter answers: the runner needs no GPU


def test_a_job_judges_what_its_harness_reads_by_the_trust_it_was_given(tmp_path: Path) -> None:
    """The reconciler's policy travels in the plan and is in force in the runner: a harness
    config naming a file outside the operator's folders fails there, read by nobody."""
    media = tmp_path / "media"
    media.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("s3cret")
    enforce(policy({"media": (str(media),), "harness": (str(tmp_path / "vss"),)}, (), "test"))
    try:
        frozen = jobs.freeze(_plan(tmp_path), Owner("default", "0" * 32))
    finally:
        enforce(None)  # the runner starts with none of its own
    (tmp_path / jobs.PLAN_FILE).write_text(frozen.model_dump_json())
    job, _ = jobs.open_job(tmp_path, io.StringIO(json.dumps({"API_TOKEN": CANARY}) + "\n"))
    try:
        assert job.trust is not None
        assert enforced() == job.trust
        assert trusted_config(config_naming(tmp_path, str(media / "a.mp4")))
        with pytest.raises(HarnessError, match="outside the folders harness and media"):
            trusted_config(config_naming(tmp_path, str(outside)))
    finally:
        enforce(None)
