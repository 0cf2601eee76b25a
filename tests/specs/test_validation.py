"""Spec loading and the observation-free rules: every refusal names file, line and rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from specs.errors import SpecError
from specs.validate import json_schema, load_spec_set, parse_text, spec_hash
from tests.specs.cases import CASES, DIGEST, GPU_CASE, HEADER, Case, body, with_captions


def _errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_text(text, "specs/x.yaml")
    return [str(i) for i in info.value.issues]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_names_file_line_and_rule(case: Case, yaml_loader: str) -> None:
    errors = _errors(case.text)
    assert any(e.startswith(f"specs/x.yaml:{case.line}:") and case.rule in e
               and case.field in e for e in errors), errors


def test_good_spec_validates_and_gpu_case_is_only_a_plan_time_error() -> None:
    spec_set = parse_text(GPU_CASE.text)  # index 7 is well-formed; only the Host can say no
    assert [r.kind for r in spec_set.resources] == ["Host", "Deployment"]


def test_duplicate_key_is_refused() -> None:
    errors = _errors(HEADER + body(extra="  port: {host: 1}\n"))
    assert any("duplicate key" in e for e in errors)


def test_broken_host_reference() -> None:
    errors = _errors(HEADER.replace("  host: local", "  host: elsewhere") + body())
    assert any("spec.host" in e and "'elsewhere' is not defined" in e for e in errors), errors


def test_trust_remote_code_with_exact_allowlist_is_accepted() -> None:
    parse_text(HEADER + body(extra="  env:\n    VLM_TRUST_REMOTE_CODE: true\n"
                                   "    RTVI_MODEL_PATH_ALLOWLIST: ngc:nim/nvidia/m:1\n"))


def test_evs_complete_is_accepted_and_deviation_is_flagged() -> None:
    spec_set = parse_text(HEADER + body(extra="  env:\n    VIA_EVS_SESSION: true\n"
                                              "    VLLM_IGNORE_EOS: true\n"
                                              "    VLM_VIDEO_PRUNING_RATE: 0.7\n"))
    assert any("VLM_VIDEO_PRUNING_RATE" in str(w) and "rule 8" in str(w)
               for w in spec_set.warnings)


@pytest.mark.parametrize("rate", ["0", "1", "1.5", "abc"])
def test_evs_pruning_rate_bounds(rate: str) -> None:
    errors = _errors(HEADER + body(extra=f"  env:\n    VIA_EVS_SESSION: true\n"
                                         f"    VLLM_IGNORE_EOS: true\n"
                                         f"    VLM_VIDEO_PRUNING_RATE: '{rate}'\n"))
    assert any("0 < rate < 1" in e for e in errors)


def test_evs_refused_on_nemotron_omni() -> None:
    model = ("    use: vllm-compatible\n    path: ngc:nim/nvidia/m:1\n"
             "    architecture: NemotronH_Nano_Omni_Reasoning_V3\n")
    errors = _errors(HEADER + body(model=model, extra="  env:\n    VIA_EVS_SESSION: true\n"
                                   "    VLLM_IGNORE_EOS: true\n    VLM_VIDEO_PRUNING_RATE: 0.5\n"))
    assert any("spec.model.architecture" in e and "rule 8" in e for e in errors)


def test_non_evs_deployment_passes_no_evs_variables() -> None:
    errors = _errors(HEADER + body(extra="  env:\n    VLLM_EVS_SIMILARITY_THRESHOLD: 0.4\n"))
    assert any("non-EVS deployment passes no EVS variables" in e for e in errors)


def test_eager_with_reasons_is_accepted() -> None:
    parse_text(HEADER + body(extra="  env:\n    VLLM_ENFORCE_EAGER: true\n  eager:\n"
                                   "    blocker: graph capture crashes on custom op\n"
                                   "    performanceImpact: ~20% lower throughput\n"
                                   "    removalCondition: vLLM 0.11 fixes capture\n"))


def test_perf_profile_refuses_prefix_caching_unless_non_standard() -> None:
    extra = "  profile: perf\n  env:\n    VLLM_ENABLE_PREFIX_CACHING: true\n"
    assert any("rule 7" in e for e in _errors(HEADER + body(extra=extra)))
    parse_text(HEADER + body(extra=extra + "  nonStandard:\n    reason: measuring cache\n"))


def test_perf_profile_forces_settings_into_environment() -> None:
    from specs.environment import effective_env

    dep = parse_text(HEADER + body(extra="  profile: perf\n")).deployments[0]
    env = effective_env(dep.spec)
    assert env["VLLM_ENABLE_PREFIX_CACHING"] == "false"
    assert env["VLLM_DISABLE_MM_PREPROCESSOR_CACHE"] == "true"
    assert env["RTVI_EMPTY_CUDA_CACHE_ON_RESULT"] == "false"


def test_mounted_model_path_must_be_read_only() -> None:
    model = "    use: vllm-compatible\n    path: /models/m\n"
    assert any("bind-mounted read-only" in e for e in _errors(HEADER + body(model=model)))
    rw = "  mounts:\n  - {source: /srv/m, target: /models, readOnly: false}\n"
    assert any("spec.mounts.0.readOnly" in e for e in _errors(HEADER + body(model=model,
                                                                            extra=rw)))
    parse_text(HEADER + body(model=model, extra="  mounts:\n  - {source: /srv/m, target: "
                                                "/models}\n"))


def test_custom_model_needs_implementation_path() -> None:
    model = "    use: custom\n"
    assert any("rule 4" in e for e in _errors(HEADER + body(model=model)))


def test_plain_secret_in_env_and_token_in_model_path_are_refused() -> None:
    assert any("rule 12" in e for e in _errors(HEADER + body(extra="  env:\n"
                                                                   "    NGC_API_KEY: abc\n")))
    model = "    use: vllm-compatible\n    path: git:https://u:hf_abcdefghijklmnopqrstu@hf.co/m\n"
    assert any("rule 12" in e for e in _errors(HEADER + body(model=model,
                                                             extra="  profile: exploration\n")))


def test_presets_set_model_identity() -> None:
    from specs.environment import effective_env

    model = "    preset: cr3-nano-reasoner-nvfp4\n"
    dep = parse_text(HEADER + body(model=model)).deployments[0]
    env = effective_env(dep.spec)
    assert env["VLM_MODEL_TO_USE"] == "cosmos-reason3"
    assert env["MODEL_PATH"].endswith(":modelopt-nvfp4-full-quantize-final_format_fix")


def test_gpu_and_port_double_booking() -> None:
    second = ("---\napiVersion: rtvi.reconciler/v1\nkind: Deployment\nmetadata:\n  name: two\n"
              f"spec:\n  host: local\n  image: rtvi-emulator@{DIGEST}\n  model:\n"
              "    use: vllm-compatible\n    path: ngc:nim/nvidia/m:1\n  port: {host: 18000}\n"
              "  gpus: [0]\n")
    errors = _errors(HEADER + body(extra="  gpus: [0]\n") + second)
    assert any("already claimed by Deployment vlm" in e and "rule 10" in e for e in errors)
    assert any("already published by Deployment vlm" in e for e in errors)


def test_spec_hash_changes_with_env_not_with_labels() -> None:
    base = parse_text(HEADER + body()).deployments[0]
    labelled = parse_text(HEADER.replace("  name: vlm", "  name: vlm\n  labels: {team: a}")
                          + body()).deployments[0]
    changed = parse_text(HEADER + body(extra="  env: {X: 1}\n")).deployments[0]
    assert spec_hash(base) == spec_hash(labelled) != spec_hash(changed)


def test_folder_loading_reports_errors_of_all_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(CASES[1].text)
    (tmp_path / "b.yml").write_text(CASES[3].text.replace("name: vlm", "name: other"))
    with pytest.raises(SpecError) as info:
        load_spec_set([tmp_path])
    files = {i.location.file for i in info.value.issues}
    assert files == {str(tmp_path / "a.yaml"), str(tmp_path / "b.yml")}


def test_json_schema_covers_kinds() -> None:
    schema = json_schema()
    assert {"Host", "Deployment"} <= set(schema["$defs"])
    assert schema["$defs"]["DeploymentSpec"]["additionalProperties"] is False


def test_spec_hash_ignores_readiness_budget_and_defaults() -> None:
    def digest(extra: str) -> str:
        return spec_hash(parse_text(HEADER + body(extra=extra), "specs/x.yaml").deployments[0])

    base = digest("")
    assert digest("  readiness: {timeoutSeconds: 5}\n") == base
    assert digest("  profile: standard\n") == base
    assert digest("  env: {A: '1'}\n") != base


def test_host_network_needs_equal_ports() -> None:
    bad = HEADER + body().replace("port: {host: 18000}", "port: {host: 18000, container: 8000}") \
        + "  network: host\n"
    errors = _errors(bad)
    assert any("port.host (18000) must equal port.container (8000)" in e for e in errors), errors
    good = HEADER + body().replace("port: {host: 18000}", "port: {host: 18000, container: 18000}") \
        + "  network: host\n"
    assert parse_text(good, "specs/x.yaml").deployments[0].spec.network == "host"


def test_the_quickstart_example_is_valid() -> None:
    examples = Path(__file__).resolve().parents[2] / "specs" / "examples" / "quickstart"
    spec_set = load_spec_set([examples])
    assert [r.kind for r in spec_set.resources].count("StreamSet") == 1
    assert spec_set.deployments[0].spec.network == "host"


@pytest.mark.parametrize("example", ["canary", "capacity", "port-validation"])
def test_every_experiment_example_is_valid_beside_the_quickstart(example: str) -> None:
    root = Path(__file__).resolve().parents[2] / "specs" / "examples"
    spec_set = load_spec_set([root / "quickstart", root / example])
    [exp] = [r for r in spec_set.resources if r.kind == "Experiment"]
    assert exp.spec.type == {"port-validation": "portValidation"}.get(
        example, example)


def test_control_character_message_names_the_character_never_the_value() -> None:
    errors = _errors(HEADER + body(extra='  env:\n    X: "canary-\\0-\\e-value"\n'
                                         '    MULTILINE: "line one\\nline two\\tTabbed\\r"\n'))
    [error] = errors
    assert "U+0000, U+001B" in error
    assert "canary" not in error
    assert "MULTILINE" not in error  # tab, newline and carriage return are allowed


def test_caption_bounds_accept_rtvi_s_own_limits() -> None:
    text = HEADER + with_captions(f"    prompt: {'x' * 10240}\n    seed: 4294967295\n")
    [ss] = [r for r in parse_text(text).resources if r.kind == "StreamSet"]
    assert ss.spec.captions is not None
    assert ss.spec.captions.seed == 4294967295


def test_an_issue_quoting_a_huge_value_stays_small_and_keeps_its_why() -> None:
    """A spec may hold 200 KB in one value: the refusal still names file, line, field and rule
    and says why, in well under a kilobyte per issue."""
    big = "x" * 200_000
    api = "apiVersion: rtvi.reconciler/v1\n"
    text = (f"{api}kind: Deployment\nmetadata: {{name: vlm}}\nspec:\n  host: local\n"
            f"  image: rtvi@sha256:{'ab' * 32}\n  model: {{path: '{big}', use: vllm-compatible}}\n"
            f"  port: {{host: 18000}}\n---\n{api}kind: \"{big}\"\nmetadata: {{name: b}}\n"
            f"spec: {{}}\n")
    errors = _errors(text)
    assert len(errors) == 2
    assert all(len(e) < 1000 for e in errors), [len(e) for e in errors]
    path, kind = errors
    assert path.startswith("specs/x.yaml:")
    assert path.endswith(": spec.model.path: String should have at most 1000 characters "
                         "(schema)")  # a length limit answers before any rule quotes it
    assert ": kind: unknown kind 'xxx" in kind
    assert "characters ...]" in kind  # quoted by its start and end
    assert kind.endswith("(schema)")


def test_a_spec_issue_prints_as_one_line_whatever_it_quotes() -> None:
    from specs.errors import Location, SpecIssue

    issue = SpecIssue(Location("specs/a\nb.yaml", 3, 1), "metadata.labels.k\x1bj",
                      "quoted 'x\ny\u202ez\x9b' here", "rule")
    assert str(issue) == ("specs/a\\nb.yaml:3:1: metadata.labels.k\\x1bj: quoted "
                          "'x\\ny\\u202ez\\x9b' here (rule)")


def test_one_huge_value_aliased_a_thousand_times_costs_little_memory_and_output() -> None:
    """Issue 26: a 500 KB string aliased 999 times once wrote 1 GB of refusals and peaked at
    2.9 GB. Each refusal is bounded, the value is judged once, and a file prints at most 20
    refusals and how many more there are."""
    import tracemalloc

    big = "x" * 500_000 + "\\0"
    text = ("apiVersion: rtvi.reconciler/v1\nkind: Deployment\nmetadata: {name: vlm}\nspec:\n"
            "  host: local\n  profile: exploration\n  image: rtvi-emulator:dev\n"
            "  model: {preset: cr3-nano-reasoner-fp8}\n  port: {host: 18000}\n"
            f'  unsafeModelConfigReview: &a "{big}"\n'
            "  env: {" + ", ".join(f"K{i}: *a" for i in range(999)) + "}\n")
    tracemalloc.start()
    try:
        errors = _errors(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000, peak  # the text is 0.5 MB; one copy of it per refusal is not
    assert len(errors) == 21
    assert sum(len(e) for e in errors) < 20_000
    assert errors[-1].endswith("more issue(s) in this file not shown; fix the ones above first "
                               "(max-issues)")


def test_a_thousand_failing_files_in_deep_folders_print_a_bounded_refusal() -> None:
    """A second sweep: 600 failing files under folders named with control characters wrote
    10.9 MB, one line per file beyond the cap, each with 3.5 KB of escaped path."""
    from specs.errors import Location, SpecIssue
    from specs.validate import MAX_ISSUES, MAX_MORE_LINES, capped

    folder = "/specs/" + "/".join("\x1b" * 60 for _ in range(14))
    issues = [SpecIssue(Location(f"{folder}/f{i}.yaml", 1, 1), "spec", "bad", "schema")
              for i in range(1000) for _ in range(3)]
    lines = [str(i) for i in capped(issues)]
    assert len(lines) == MAX_ISSUES + MAX_MORE_LINES + 1
    # 200 shown (66 files and 2 of a 67th), 20 files named with their rest (1 + 19 x 3),
    # and one line for the other 914 files' 2,742.
    assert lines[-1].split(": ", 1)[1] == ("and 2742 more issue(s) in 914 more file(s) not "
                                           "shown (max-issues)")
    assert max(map(len, lines)) < 1_500  # the path is shown by its start and end, escaped
    assert sum(map(len, lines)) < 300_000  # however many files fail (it was 10.9 MB)


def test_warnings_never_crowd_out_an_error() -> None:
    """Issue 26 review: warnings and errors shared the 20-per-file cap, so 24 warnings
    before an error left a refusal with no error in it."""
    sources = "".join(f"  - {{name: s{i}, url: 'rtsp://127.0.0.1:8554/same'}}\n"
                      for i in range(25))
    text = (HEADER + body() + "---\napiVersion: rtvi.reconciler/v1\nkind: StreamSet\n"
            "metadata: {name: cams}\nspec:\n  deployment: vlm\n  sources:\n" + sources
            + "---\napiVersion: rtvi.reconciler/v1\nkind: Deployment\nmetadata: {name: two}\n"
            "spec:\n  host: nowhere\n  profile: exploration\n  image: img:dev\n"
            "  model: {preset: cr3-nano-reasoner-fp8}\n  port: {host: 18001}\n")
    errors = _errors(text)
    assert any("'nowhere' is not defined" in e for e in errors), errors
