"""A real 3-member etcd cluster on loopback for a test (``scripts/etcd-cluster.sh``, the same
recipe the README gives): members can be killed (SIGKILL, as a crash) and started again."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ports import free_port

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "etcd-cluster.sh"
MEMBERS = ("m1", "m2", "m3")


@dataclass
class EtcdCluster:
    folder: Path
    endpoints: list[str]

    def _script(self, *args: str) -> None:
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr + done.stdout

    def kill(self, member: str) -> None:
        self._script("stop-member", str(self.folder), member)

    def start(self, member: str) -> None:
        self._script("start-member", str(self.folder), member)

    def stop(self) -> None:
        self._script("stop", str(self.folder))


@pytest.fixture
def etcd_cluster() -> Iterator[EtcdCluster]:
    if shutil.which("etcd") is None:
        raise RuntimeError("etcd is not installed: scripts/setup.sh installs etcd-server")
    folder = Path(tempfile.mkdtemp(prefix="rtvi-etcd-"))
    clients = ",".join(str(free_port()) for _ in MEMBERS)
    peers = ",".join(str(free_port()) for _ in MEMBERS)
    done = subprocess.run(["bash", str(SCRIPT), "start", str(folder), clients, peers],
                          capture_output=True, text=True, timeout=60, check=False)
    cluster = EtcdCluster(folder, done.stdout.strip().split(","))
    try:
        assert done.returncode == 0, done.stderr + done.stdout
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
