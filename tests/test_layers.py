"""The layering is checked, not hoped for: the import contracts in ``pyproject.toml``
(``[tool.importlinter]``, run by ``scripts/test.sh``) hold for the tree as it is, and break when
a lower layer imports a higher one.

The packages are copied to a temporary folder and one wrong-way import is planted in the copy;
``lint-imports`` reads the copy through ``PYTHONPATH`` (its ``root_packages`` are found there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reconciler", "controllers", "specs", "state", "emulators")
LINT = Path(sys.executable).parent / "lint-imports"


def _tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--no-cache", "--no-logo", str(tree / "pyproject.toml")],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _plant(tree: Path, module: str, line: str) -> None:
    _fifth_kind(tree)
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}  # planted\n")


def _fifth_kind(tree: Path) -> None:
    """A kind none of the contracts names (``controllers.kinds.beacon``): they must hold for
    it as for the four, since they name the kinds' parent package, not the kinds."""
    folder = tree / "controllers" / "kinds" / "beacon"
    folder.mkdir(exist_ok=True)
    (folder / "__init__.py").write_text('"""A fifth kind."""\n')
    (folder / "kind.py").write_text('"""Its adapter."""\n')


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    done = _lint(_tree(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("controllers.errors", "import reconciler.engine", "over the spec and state models"),
    ("specs.models", "import controllers.ownership", "over the spec and state models"),
    ("reconciler.engine", "import reconciler.daemon", "CLI over daemon"),
    ("controllers.contract", "import controllers.kinds.host.session", "registry know no kind"),
    ("reconciler.kinds.registry", "import controllers.kinds.streamset.plan",
     "registry know no kind"),
    ("controllers.services", "import controllers.kinds.streamset.captions",
     "registry know no kind"),
    # every kind, present and future: a kind folder that is not one of the four
    ("reconciler.engine", "import controllers.kinds.beacon", "never import a kind"),
    ("reconciler.output", "import controllers.kinds.host.facts", "never import a kind"),
    ("reconciler.sharing", "import controllers.kinds.deployment.plan", "never import a kind"),
    ("controllers.kinds.beacon.kind", "import controllers.kinds.host.kind",
     "do not import each other"),
    ("controllers.clients.rtvi_client", "import controllers.kinds.streamset.frames",
     "Shared clients and modules know no kind"),
    ("controllers.kinds.host.session", "import controllers.kinds.deployment.readiness",
     "over the kinds it depends on"),
    ("controllers.kinds.deployment.plan", "import controllers.kinds.experiments.capacity.search",
     "over the kinds it depends on"),
    ("controllers.kinds.deployment.kind", "import controllers.kinds.streamset.kind",
     "do not import each other"),
    ("controllers.kinds.deployment.readiness", "import emulators.rtvi",
     "never imports the emulators"),
    ("emulators.rtvi.core", "import specs.models", "not our code"),
])
def test_a_wrong_way_import_breaks_its_contract(tmp_path: Path, module: str, line: str,
                                               contract: str) -> None:
    tree = _tree(tmp_path)
    _plant(tree, module, line)
    done = _lint(tree)
    assert done.returncode != 0, done.stdout
    assert f"{module} -> " in done.stdout  # the report names the import that broke it
    broken = [row for row in done.stdout.splitlines() if " BROKEN" in row]
    assert any(contract in row for row in broken), done.stdout
