"""GPU facts of a Host from ``nvidia-smi`` (parsers shared by local and SSH Hosts).

GPUs come from ``nvidia-smi`` on the Host (for the local engine, this machine). A Host without
``nvidia-smi`` has no GPUs as far as we are concerned ("none"), which is the truth on CPU-only
machines and keeps GPU rules honest: they are judged on what is really there.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

from controllers.errors import TemporaryError
from specs.facts import GpuInfo

if TYPE_CHECKING:  # asyncssh is imported by SSH Hosts alone
    from controllers.clients.ssh import SshTunnel

NVIDIA_SMI = "nvidia-smi"
GPU_QUERY = "index,uuid,name,compute_cap,memory.total,memory.used"
APPS_QUERY = "gpu_uuid,pid,used_memory"
PROBE_TIMEOUT_S = 20
EXIT_COMMAND_NOT_FOUND = 127
NO_GPU_MARKERS = ("command not found", "no such file or directory", "not found")
NO_DEVICES_MARKER = "no devices were found"


def local_gpus() -> tuple[list[GpuInfo], str]:
    """GPUs of this machine via nvidia-smi; ([], "none") when there is no nvidia-smi."""
    if shutil.which(NVIDIA_SMI) is None:
        return [], "none"
    out = _run_smi([f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    return parse_gpu_csv(out), "nvidia-smi"


def gpu_processes() -> dict[str, int]:
    """Used memory (MiB) by compute processes per GPU UUID; used to wait for a replaced
    container's GPU memory to be released before starting its successor (rule 10)."""
    if shutil.which(NVIDIA_SMI) is None:
        return {}
    out = _run_smi([f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits"])
    return parse_apps_csv(out)


def _run_smi(args: list[str]) -> str:
    status, out, err = run_local([NVIDIA_SMI, *args])
    if status != 0:
        raise TemporaryError(f"nvidia-smi exited {status}: {err.strip()}")
    return out


def run_local(argv: list[str]) -> tuple[int, str, str]:
    """Run a command on this machine as an SSH Host's tunnel runs one there: (status,
    stdout, stderr); a missing program is 127, no answer within PROBE_TIMEOUT_S is 124."""
    if shutil.which(argv[0]) is None:
        return 127, "", f"{argv[0]}: not found"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer within {PROBE_TIMEOUT_S} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc.strerror or exc}"
    return done.returncode, done.stdout, done.stderr


def parse_gpu_csv(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=index,uuid,name,compute_cap,memory.total,memory.used
    --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        gpus.append(GpuInfo(index=int(cells[0]), uuid=cells[1], name=cells[2],
                            compute_capability=cells[3], memory_total_mib=_int(cells[4]),
                            memory_used_mib=_int(cells[5])))
    return gpus


def parse_apps_csv(text: str) -> dict[str, int]:
    used: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3 and cells[0].startswith(("GPU-", "MIG-")):
            used[cells[0]] = used.get(cells[0], 0) + _int(cells[2])
    return used


def _int(text: str) -> int:
    try:
        return int(float(text))
    except ValueError:
        return 0


def remote_gpus(tunnel: SshTunnel) -> tuple[list[GpuInfo], str]:
    """GPUs of a remote Host via its ``nvidia-smi``; ``([], "none")`` when it has none.

    Same query and parser as local Hosts (``controllers.kinds.host.gpus``), so facts look the same
    wherever they came from. A driver that answers "No devices were found" is a real, empty
    inventory."""
    status, out, err = tunnel.run(
        [NVIDIA_SMI, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    if status == EXIT_COMMAND_NOT_FOUND or (
            status != 0 and any(marker in err.lower() for marker in NO_GPU_MARKERS)):
        return [], "none"
    if status != 0 and NO_DEVICES_MARKER in (out + err).lower():
        return [], NVIDIA_SMI
    if status != 0:
        raise TemporaryError(f"Host {tunnel.host_name}: nvidia-smi exited {status}: "
                             f"{err.strip() or out.strip()}")
    return parse_gpu_csv(out), NVIDIA_SMI
