"""The registry orders kinds by what their references name: nothing else says it."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.kinds import REGISTRY
from reconciler.kinds.registry import Registry, RegistryError
from specs.kinds import SPEC_KINDS
from state.keys import Key
from tests.reconciler.toy_kinds import LampKind, SwitchKind


def test_the_built_in_kinds_are_ordered_by_their_references() -> None:
    assert SPEC_KINDS["StreamSet"].depends_on == ("Deployment", "Host")
    assert SPEC_KINDS["Experiment"].depends_on == ("Deployment",)  # its template
    assert [(k, REGISTRY.level(k)) for k in REGISTRY.names] == [
        ("Host", 0), ("Deployment", 1), ("Experiment", 2), ("StreamSet", 2)]


def test_a_kind_whose_references_name_an_unregistered_kind_is_refused(tmp_path: Path) -> None:
    registry = Registry()
    with pytest.raises(RegistryError, match=r"Lamp depends on unregistered kind.*Switch"):
        registry.register(LampKind(tmp_path))
    assert "Lamp" not in SPEC_KINDS  # refused: the loader does not learn it either
    registry.register(SwitchKind(tmp_path))
    registry.register(LampKind(tmp_path))
    try:
        assert registry.names == ["Switch", "Lamp"]
        keys = [Key("Lamp", "desk"), Key("Switch", "hall")]
        assert registry.converge_order(keys) == [Key("Switch", "hall"), Key("Lamp", "desk")]
        assert registry.delete_order(keys) == keys
        with pytest.raises(RegistryError, match="Switch is needed by Lamp"):
            registry.unregister("Switch")
    finally:
        registry.unregister("Lamp")
        registry.unregister("Switch")
    assert "Lamp" not in SPEC_KINDS
    assert "Switch" not in SPEC_KINDS
