"""kill -9 at random moments never leaves an unreadable store.

A real child process saves statuses with growing content and appends events as fast as it can;
the test kills it with SIGKILL after a random number of completed iterations, then checks with a
fresh Store that every status file loads, that the event log reads, and that nothing the child
reported as done was lost. The same directory is reused across rounds, so each round also
checks that a writer restarting after a crash recovers (event sequence continues, no holes).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from state import Store

ROUNDS = 8
MAX_ITERATIONS_BEFORE_KILL = 60
MAX_EXTRA_DELAY_S = 0.03
"""After the chosen iteration, wait up to this long so the kill lands anywhere in the next
one (mostly inside a write), not always right after the progress line."""
RESOURCES = 5

WRITER = """
import sys
from pathlib import Path
from state import HistoryEntry, InventoryItem, ResourceStatus, Store, utc_now

store = Store(Path(sys.argv[1]))
round_no = int(sys.argv[2])
i = 0
while True:
    name = f"d{i % 5}"
    status = store.load(f"Deployment/{name}") or ResourceStatus(
        resource=f"Deployment/{name}", kind="Deployment", name=name
    )
    status.facts["round"] = round_no
    status.facts["i"] = i
    status.facts["blob"] = "x" * (2000 * (i + 1))  # growing: writes take longer and longer
    status.add_history(HistoryEntry(time=utc_now(), action="create", target=name,
                                    cause=f"round {round_no} i {i}", result="ok"))
    status.upsert_inventory(InventoryItem(kind="container", name=f"c{i}", host="local",
                                          created_at=utc_now()))
    store.save(status)
    store.events.append(f"Deployment/{name}", "Normal", "Saved",
                        f"round {round_no} i {i} " + "y" * (50 * i))
    print(i, flush=True)
    i += 1
"""


def test_kill9_leaves_a_readable_store(tmp_path: Path) -> None:
    root = tmp_path / "state"
    rng = random.Random()
    for round_no in range(ROUNDS):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(round_no)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        wanted = rng.randint(1, MAX_ITERATIONS_BEFORE_KILL)
        done = -1
        for _ in range(wanted):
            line = child.stdout.readline()
            assert line, f"writer died early with {child.wait()}"
            done = int(line)
        time.sleep(rng.uniform(0, MAX_EXTRA_DELAY_S))  # a random moment, not a wait for state
        child.send_signal(signal.SIGKILL)  # the child is somewhere past iteration `done`
        child.wait()
        child.stdout.close()
        assert child.returncode == -signal.SIGKILL

        store = Store(root)
        statuses = store.list()  # raises CorruptState if any file is torn
        assert 1 <= len(statuses) <= RESOURCES
        for status in statuses:
            assert store.load(status.key) == status
        this_round = [s.facts["i"] for s in statuses if s.facts["round"] == round_no]
        assert max(this_round) >= done  # everything reported as saved is there

        events = store.events.read()
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), "holes or duplicates in event seqs"
        messages = {e.message.split(" y")[0].strip() for e in events}
        for i in range(done + 1):
            assert f"round {round_no} i {i}" in messages
        raw_lines = store.events.path.read_bytes().split(b"\n")
        unparsable = len([x for x in raw_lines if x.strip()]) - len(events)
        assert unparsable <= 1, "more than the torn last line was lost"
        if unparsable:
            assert not store.events.path.read_bytes().endswith(b"\n")
