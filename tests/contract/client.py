"""An authenticated httpx client for a recorded emulator, and readiness with a bearer token."""

from __future__ import annotations

import httpx

from tests.emulators.helpers import EmulatorProcess, wait_for

LONG_TIMEOUT = httpx.Timeout(30.0)


def client(emulator: EmulatorProcess, token: str | None) -> httpx.Client:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.Client(
        base_url=emulator.base_url, timeout=LONG_TIMEOUT, trust_env=False, headers=headers
    )


def wait_ready(emulator: EmulatorProcess, token: str | None) -> None:
    def probe() -> bool | None:
        if emulator.process.poll() is not None:
            raise AssertionError(f"emulator exited: {emulator.stderr()[-2000:]}")
        try:
            with client(emulator, token) as http:
                return True if http.get("/v1/health/ready").status_code == 200 else None
        except httpx.TransportError:
            return None

    wait_for(probe, what="the emulator to be ready")
