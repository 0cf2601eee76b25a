"""Fixtures of the spec tests."""

from __future__ import annotations

import pytest
import yaml

from specs import loader


@pytest.fixture(params=["libyaml", "python"])
def yaml_loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each loader in turn: libyaml's parser (the default, where PyYAML has it, as our wheel
    does) and the pure-Python one it falls back to; both must refuse the same input alike."""
    if request.param == "python":
        monkeypatch.setattr(loader, "_Loader", loader._LimitedLoader)
    else:
        assert yaml.__with_libyaml__
        assert loader._Loader is not loader._LimitedLoader
    return str(request.param)
