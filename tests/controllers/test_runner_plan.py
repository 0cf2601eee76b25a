"""The runner image's plan, without an engine: which distributions and files go in."""

from __future__ import annotations

import re

import pytest

from controllers import rootimage
from controllers.errors import PermanentError
from controllers.kinds.experiments.runner import image as runner_image


def test_the_distributions_are_the_run_codes_imports_and_their_requirements_only() -> None:
    names = {re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
             for dist in runner_image.distributions()}
    assert {"pydantic", "pydantic-core", "docker", "httpx", "matplotlib", "numpy",
            "nvidia-ml-py", "pyyaml"} <= names
    # The SSH client, the file watcher, the CLI's libraries and every dev tool stay out.
    assert not names & {"asyncssh", "watchfiles", "click", "pytest", "mypy", "ruff"}


def test_a_missing_distribution_is_named() -> None:
    with pytest.raises(PermanentError, match="no-such-dist-xyz is not installed"):
        runner_image.distributions(("no-such-dist-xyz",))


def test_the_plan_holds_our_run_packages_and_no_cli_daemon_or_emulator() -> None:
    items = runner_image.plan()
    app = {dest.split("/")[3] for dest in items if dest.startswith(runner_image.APP + "/")}
    assert app == {"controllers", "specs", "state"}
    assert f"{runner_image.APP}/controllers/kinds/experiments/run.py" in items
    # Byte code goes in (a fresh container would compile every import again), not -O's.
    assert not [d for d in items if rootimage.OPTIMIZED_BYTECODE in d]
    assert "usr/lib/python3.11/__pycache__/os.cpython-311.pyc" in items
    assert f"{runner_image.APP}/controllers/__pycache__/contract.cpython-311.pyc" in items
    assert "usr/bin/python3" in items
