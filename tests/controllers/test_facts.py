"""Runtime facts from logs, nvidia-smi parsing and the rules judged against Host facts."""

from __future__ import annotations

from pathlib import Path

from controllers.kinds.deployment.controller import gpus_held_by_others
from controllers.kinds.deployment.runtime_facts import VLLM_DEFAULT, fatal_marker, update_facts
from controllers.kinds.host.gpus import parse_apps_csv, parse_gpu_csv
from specs.facts import GpuInfo, HostFacts
from specs.hostrules import check_against_host, check_gpu_exclusivity
from specs.validate import parse_text
from state.keys import Key
from state.models import InventoryItem, ResourceStatus, utc_now
from state.store import Store
from tests.specs.cases import HEADER, body

VLLM_CONFIG_LINE = (
    "INFO 12-02 18:00:00 [core.py:69] Initializing a V1 LLM engine (v0.10.1) with config: "
    "model='/models/x', speculative_config=None, tokenizer='/models/x', trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=16384, quantization=fp8, enforce_eager=True, "
    "kv_cache_dtype=fp8_e4m3, device_config=cuda, seed=0"
)
# Captured on a real H200 with the exact queries controllers.kinds.host.gpus runs (GPU_QUERY,
# APPS_QUERY),
# the apps file while a CUDA process held memory.
DATA = Path(__file__).resolve().parent.parent / "data"
H200_GPUS = (DATA / "nvidia-smi-h200-gpus.csv").read_text()
H200_APPS = (DATA / "nvidia-smi-h200-apps.csv").read_text()


def test_runtime_facts_from_vllm_config_line() -> None:
    facts: dict[str, str] = {}
    update_facts(facts, VLLM_CONFIG_LINE)
    assert facts == {"precision": "fp8", "max_model_len": "16384",
                     "kv_cache_dtype": "fp8_e4m3", "mode": "eager"}


def test_unquantized_precision_is_dtype_and_graphs_mean_cuda_graph_mode() -> None:
    facts: dict[str, str] = {}
    update_facts(facts, VLLM_CONFIG_LINE.replace("quantization=fp8", "quantization=None")
                 .replace("enforce_eager=True", "enforce_eager=False"))
    update_facts(facts, "INFO Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%")
    assert facts["precision"] == "torch.bfloat16"
    assert facts["mode"] == "cuda-graph"


def test_scheduler_limits_memory_caches_and_workers_are_read_as_the_runtime_says_them(
        ) -> None:
    facts: dict[str, str] = {}
    update_facts(facts, "INFO 12-02 18:00:00 [utils.py:326] non-default args: {'model': "
                 "'/models/x', 'max_model_len': 16384, 'gpu_memory_utilization': 0.85, "
                 "'max_num_seqs': 64, 'max_num_batched_tokens': 8192, "
                 "'enable_prefix_caching': False, 'mm_processor_cache_gb': 0}")
    update_facts(facts, "INFO 12-02 18:00:01 [rtvi] preprocess workers: 6")
    assert facts == {"gpu_memory_utilization": "0.85", "max_num_seqs": "64",
                     "max_num_batched_tokens": "8192", "enable_prefix_caching": "False",
                     "mm_processor_cache_gb": "0", "preprocess_workers": "6"}
    # vLLM lists only what differs from its defaults: the rest is said to be its default
    defaults: dict[str, str] = {}
    update_facts(defaults, "INFO [utils.py:326] non-default args: {'max_num_seqs': 32}")
    assert defaults["max_num_seqs"] == "32"
    assert defaults["gpu_memory_utilization"] == VLLM_DEFAULT


def test_fatal_markers() -> None:
    assert fatal_marker("torch.OutOfMemoryError: CUDA out of memory. Tried") == "CUDA out of memory"
    assert fatal_marker("vllm.v1.engine.exceptions.EngineDeadError: dead") == "EngineDeadError"
    assert fatal_marker("ERROR FMHA kernels are not found for sm_89") == (
        "FMHA kernels are not found")
    assert fatal_marker("INFO all good") is None


def test_parse_nvidia_smi_gpu_and_apps() -> None:
    [gpu] = parse_gpu_csv(H200_GPUS)
    assert gpu.name == "NVIDIA H200"
    assert gpu.capability == (9, 0)
    assert gpu.index == 0
    assert gpu.uuid == "GPU-a6b00091-c0f9-9e3b-fb2e-50c934e98f07"
    assert gpu.memory_total_mib == 143771
    assert parse_apps_csv(H200_APPS) == {gpu.uuid: 1542}
    apps = parse_apps_csv("GPU-a, 123, 1000\nGPU-a, 124, 24\nGPU-b, 7, 5\n")
    assert apps == {"GPU-a": 1024, "GPU-b": 5}


def _facts(*caps: str) -> HostFacts:
    gpus = [GpuInfo(index=i, uuid=f"GPU-{i}", name="gpu", compute_capability=c,
                    memory_total_mib=1) for i, c in enumerate(caps)]
    return HostFacts(name="local", engine_version="20.10", api_version="1.41", gpus=gpus)


def test_gpu_the_host_lacks_is_refused_by_index_and_uuid() -> None:
    dep = parse_text(HEADER + body(extra="  gpus: [3, GPU-x]\n")).deployments[0]
    findings = check_against_host(dep, _facts("9.0"))
    assert [f.path for f in findings] == [("spec", "gpus", 0), ("spec", "gpus", 1)]
    assert all("rule 10" in f.rule for f in findings)


def test_nvfp4_needs_compute_capability_10() -> None:
    model = "    preset: cr3-nano-reasoner-nvfp4\n"
    hopper = parse_text(HEADER + body(model=model, extra="  gpus: [0]\n")).deployments[0]
    assert any("rule 3" in f.rule for f in check_against_host(hopper, _facts("9.0")))
    assert check_against_host(hopper, _facts("10.0")) == []
    no_gpu = parse_text(HEADER + body(model=model)).deployments[0]
    assert any("no GPU is assigned" in f.message for f in check_against_host(no_gpu,
                                                                            _facts("10.0")))


def test_index_and_uuid_naming_one_gpu_are_double_booking() -> None:
    a = parse_text(HEADER + body(extra="  gpus: [0]\n")).deployments[0]
    b_text = (HEADER.replace("name: vlm", "name: other") + body(extra="  gpus: [GPU-0]\n"))
    b = parse_text(b_text).deployments[0]
    found = check_gpu_exclusivity([a, b], _facts("9.0"))
    assert len(found) == 1
    assert "already claimed by Deployment vlm" in found[0][1].message


def test_gpu_held_by_a_deployment_applied_in_an_earlier_run(tmp_path: Path) -> None:
    """Rule 10 across separate `apply` runs: the store remembers who still holds a GPU."""
    store = Store(tmp_path / "state")
    earlier = parse_text(HEADER.replace("name: vlm", "name: old") + body(
        extra="  gpus: [GPU-1]\n")).deployments[0]

    def deployed(st: ResourceStatus) -> None:
        st.facts["host"] = "local"
        st.applied_spec = earlier.spec.model_dump(mode="json")
        st.source_file = "old.yaml"
        st.upsert_inventory(InventoryItem(kind="container", name="rtvi-old", host="local",
                                          id="c" * 64, state="created", created_at=utc_now()))
    store.update(Key("Deployment", "old"), deployed)
    new_set = parse_text(HEADER + body(extra="  gpus: [1]\n"))
    [finding] = gpus_held_by_others(new_set.deployments[0], new_set, store, _facts("9.0", "9.0"))
    assert finding.path == ("spec", "gpus", 0)
    assert "rule 10" in finding.rule
    assert "held by Deployment/old (from old.yaml)" in finding.message

    # Applying both together is the in-set check's business; another GPU is free.
    assert gpus_held_by_others(earlier, parse_text(HEADER.replace("name: vlm", "name: old")
                               + body(extra="  gpus: [GPU-1]\n")), store,
                               _facts("9.0", "9.0")) == []
    other = parse_text(HEADER + body(extra="  gpus: [0]\n"))
    assert gpus_held_by_others(other.deployments[0], other, store, _facts("9.0", "9.0")) == []
    # Once its container is gone (deleted), the GPU is free again.
    store.update(Key("Deployment", "old"),
                 lambda st: st.remove_inventory("container", "rtvi-old"))
    assert gpus_held_by_others(new_set.deployments[0], new_set, store,
                               _facts("9.0", "9.0")) == []
