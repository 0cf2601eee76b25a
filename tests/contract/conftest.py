"""Fixtures of the contract tests: the emulator-process factory of the emulator tests."""

from tests.emulators.conftest import start_emulator

__all__ = ["start_emulator"]
