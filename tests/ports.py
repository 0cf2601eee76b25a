"""Loopback ports for the servers tests start, from below the kernel's ephemeral range.

A port the kernel hands out for ``bind(0)`` comes from the same range it takes the local port
of every outgoing connection from (``net.ipv4.ip_local_port_range``, 32768-60999 here). A
test that asks for such a port, lets it go, and starts a server on it seconds later (a
container, a daemon) can find it taken by a client's connection meanwhile, on a machine busy
with loopback traffic: the server cannot bind, and the test times out waiting for it. No
outgoing connection ever takes a port below that range, so the tests' servers take theirs
there: each xdist worker its own slice (two workers never race for one), each process going
through its slice in order from a random start (two calls never return the same port).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import socket
from collections.abc import Iterator
from pathlib import Path

LOOPBACK = "127.0.0.1"
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
SLICES = 16  # xdist workers gw0..gw15 each get one; more wrap around


def _below_ephemeral() -> tuple[int, int]:
    """The test range: up to 12 768 ports just below where the kernel's ephemeral range
    starts (32768 by default; read, as a machine may set it lower)."""
    try:
        first = int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32768
    highest = min(32767, first - 1)
    return max(1024, highest - 12767), highest


LOWEST, HIGHEST = _below_ephemeral()


def _range() -> tuple[int, int]:
    """This process's slice of the test range (all of it outside xdist)."""
    worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    if worker is None:
        return LOWEST, HIGHEST
    width = (HIGHEST - LOWEST + 1) // SLICES
    start = LOWEST + (int(worker.group(1)) % SLICES) * width
    return start, start + width - 1


def _candidates() -> Iterator[int]:
    low, high = _range()
    first = random.randint(low, high)
    return itertools.cycle([*range(first, high + 1), *range(low, first)])


_NEXT = _candidates()


def free_port() -> int:
    """A loopback TCP port nothing listens on or is connected from, that this process has not
    handed out lately."""
    for port in itertools.islice(_NEXT, HIGHEST - LOWEST + 1):
        with socket.socket() as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue  # in use: the next one
            return port
    raise RuntimeError(f"no free loopback port in {_range()}")
