"""A fifth kind added the way a contributor would: a folder and one line in the table of kinds.

The product's packages are copied to a temporary folder; a ``Beacon`` kind (its world: a file
holding a message) is added there as ``controllers/kinds/beacon/`` plus one line in
``specs.kinds.KINDS``, and nothing else is edited (the test compares the two trees). The real
CLI, run from the copy, then validates, plans, applies, shows and describes it in the schema,
and a real daemon converges a change and a new Beacon. Before the one table, ``validate`` and
``plan`` refused such a kind (``unknown kind``) while the daemon accepted it.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.e2e.daemon_helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reconciler", "controllers", "specs", "state")
TABLE_LINE = ('    KindEntry("Host", "specs.declarations:HOST", '
              '"controllers.kinds.host.kind:HostKind",\n'
              '              "controllers.kinds.host.facts:HostStatusFacts"),\n')

SPEC_PY = '''"""The Beacon kind's spec side: a file that holds a message."""

from __future__ import annotations

from typing import Literal

from specs.kinds import SpecKind
from specs.models import Metadata, Strict


class BeaconSpec(Strict):
    file: str
    message: str


class Beacon(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["Beacon"]
    metadata: Metadata
    spec: BeaconSpec


BEACON = SpecKind("Beacon", Beacon)
'''

KIND_PY = '''"""The Beacon kind's controller: it writes its message into its file."""

from __future__ import annotations

from pathlib import Path

from controllers.actions import Action
from controllers.kinds.beacon.spec import BEACON, Beacon
from controllers.contract import (
    PassContext, Report, ResourcePlan, Result, Runtime, declared_references, done,
)
from controllers.services import Services
from specs.validate import spec_hash
from state.keys import Key
from state.models import ResourceStatus


class BeaconPlan:
    def __init__(self, verb: str | None, target: str, cause: str) -> None:
        self.actions = [Action(verb, target, cause)] if verb else []
        self.conflict: str | None = None

    @property
    def changes(self) -> bool:
        return bool(self.actions)


class BeaconKind:
    name = "Beacon"
    spec = BEACON
    owns = True
    max_parallel: int | None = None

    def references(self, resource: Beacon) -> list[Key]:
        return declared_references(self.spec, resource)

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        return []

    def plan(self, ctx: PassContext, resource: Beacon) -> ResourcePlan[Beacon, BeaconPlan]:
        path = Path(resource.spec.file)
        have = path.read_text() if path.exists() else None
        verb = None if have == resource.spec.message else "create" if have is None else "replace"
        name = resource.metadata.name
        return ResourcePlan(Key("Beacon", name), name, desired=resource,
                            plan=BeaconPlan(verb, f"file {path}", f"say {resource.spec.message}"))

    def act(self, ctx: PassContext, rp: ResourcePlan[Beacon, BeaconPlan]) -> Result:
        beacon = rp.desired
        assert beacon is not None
        Path(beacon.spec.file).write_text(beacon.spec.message)

        def facts(st: ResourceStatus) -> None:
            st.applied_revision = ctx.revision
            st.observed_generation = spec_hash(beacon)
            st.facts["file"] = beacon.spec.file
        return done(rp.resource, "lit", "Lit", changed=rp.changes,
                    report=Report(f"saying {beacon.spec.message}", facts))

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        Path(str(record.facts.get("file"))).unlink(missing_ok=True)
        ctx.services.store.delete(record.key)
        return done(record.key, "dark", changed=True)

    def background(self, services: Services, runtime: Runtime) -> None:
        return None
'''


def _beacon(name: str, file: Path, message: str) -> str:
    return (f"apiVersion: rtvi.reconciler/v1\nkind: Beacon\nmetadata: {{name: {name}}}\n"
            f"spec: {{file: {file}, message: {message}}}\n")


def _tree(tmp_path: Path) -> Path:
    """The packages, then the contributor's change: the folder and the table's one line."""
    tree = tmp_path / "tree"
    for package in (*PACKAGES, "emulators"):
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    folder = tree / "controllers" / "kinds" / "beacon"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""The Beacon kind: a file that holds a message."""\n')
    (folder / "spec.py").write_text(SPEC_PY)
    (folder / "kind.py").write_text(KIND_PY)
    table = tree / "specs" / "kinds.py"
    text = table.read_text()
    assert TABLE_LINE in text
    table.write_text(text.replace(TABLE_LINE, TABLE_LINE + '    KindEntry("Beacon", '
                                  '"controllers.kinds.beacon.spec:BEACON", '
                                  '"controllers.kinds.beacon.kind:BeaconKind"),\n'))
    return tree


def _changed(tree: Path) -> list[str]:
    """Every file of the copy that differs from the product's own, or is new."""
    changed = []
    for path in sorted(tree.rglob("*.py")):
        relative = path.relative_to(tree)
        original = ROOT / relative
        if not original.exists() or not filecmp.cmp(path, original, shallow=False):
            changed.append(str(relative))
    return changed


def test_a_fifth_kind_needs_its_folder_and_one_line(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    assert _changed(tree) == ["controllers/kinds/beacon/__init__.py",
                              "controllers/kinds/beacon/kind.py",
                              "controllers/kinds/beacon/spec.py", "specs/kinds.py"]
    state, specs, world = tmp_path / "state", tmp_path / "specs", tmp_path / "world"
    state.mkdir(mode=0o700)
    specs.mkdir()
    world.mkdir()
    (specs / "beacons.yaml").write_text(_beacon("hello", world / "hello", "hi"))
    env = {**os.environ, "PYTHONPATH": str(tree), "RECONCILER_INSTANCE": "beacons"}
    base = [sys.executable, "-m", "reconciler.cli", "--state-dir", str(state)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], cwd=tree, env=env, capture_output=True,
                              text=True, timeout=120, check=False)

    valid = cli("validate", str(specs))
    assert valid.returncode == 0, valid.stdout + valid.stderr
    schema = json.loads(cli("schema").stdout)
    assert "Beacon" in json.dumps(schema), "the schema leaves the kind out"
    planned = cli("plan", str(specs))
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert f"Beacon/hello: create file {world / 'hello'}" in planned.stdout, planned.stdout
    applied = cli("apply", str(specs))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (world / "hello").read_text() == "hi"
    shown = cli("status")
    assert "Beacon/hello" in shown.stdout, shown.stdout
    assert "Lit" in shown.stdout, shown.stdout
    assert cli("plan", str(specs)).returncode == 0  # in sync

    daemon = subprocess.Popen([*base, "run", "--specs", str(specs), "--metrics-address", "off",
                               "--quiet-period", "0"], cwd=tree, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        (specs / "beacons.yaml").write_text(_beacon("hello", world / "hello", "again") + "---\n"
                                            + _beacon("second", world / "second", "two"))
        wait_for("the daemon to converge the change and the new Beacon", lambda: (
            (world / "second").exists() and (world / "hello").read_text() == "again") or None,
            60, 0.1)
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, out
    assert "Traceback" not in out
    assert "Beacon/second" in cli("status").stdout
    # The layering holds for it unchanged: its contracts name the kinds' parent, not the kinds.
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    lint = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache",
                           "--no-logo"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
