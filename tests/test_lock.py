"""The lock file is the install: it pins what pyproject.toml asks for, and the venv is the lock.

`scripts/setup.sh` installs `requirements.lock` (hashes required) and then this project without
resolving anything, so a machine set up months later runs the same dependencies. These tests
fail when someone edits pyproject.toml's dependencies and forgets `scripts/lock.sh`, and when a
venv drifted from the lock. They read files only (no network), so they sit in the fast layer.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)")


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[canonicalize_name(match.group(1))] = Version(match.group(2))
    return pins


def _asked() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    return [Requirement(line) for line in lines]


def test_every_requirement_is_pinned_within_its_range() -> None:
    pins = _pins()
    wrong = []
    for req in _asked():
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None or not req.specifier.contains(pinned, prereleases=True):
            wrong.append(f"{req} (lock: {pinned})")
    assert not wrong, f"requirements.lock is stale; run scripts/lock.sh: {wrong}"


def test_every_pin_carries_hashes() -> None:
    text = (ROOT / "requirements.lock").read_text()
    blocks = re.split(r"\n(?=[A-Za-z0-9_.\-]+==)", text)
    unhashed = [b.split()[0] for b in blocks if PIN.match(b) and "--hash=sha256:" not in b]
    assert not unhashed
    assert len(_pins()) > 20  # the whole tree, not just the direct requirements


def test_the_venv_is_the_lock() -> None:
    drift = []
    for name, version in _pins().items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            drift.append(f"{name}: not installed")
            continue
        if installed != version:
            drift.append(f"{name}: {installed} installed, {version} locked")
    assert not drift, f"run scripts/setup.sh: {drift}"


def test_no_dependency_warning_reaches_the_terminal() -> None:
    """The daemon talking SSH once opened with five CryptographyDeprecationWarning lines."""
    code = ("import asyncssh, docker, reconciler.cli, controllers.clients.ssh, "
            "controllers.kinds.host.gpus")
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""
