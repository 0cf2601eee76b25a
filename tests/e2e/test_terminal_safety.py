"""No terminal control sequence from outside reaches a person's terminal (issue 9, finding 5).

Model IDs, container log lines, container labels, condition messages and events are text we do
not control. Planted ESC/OSC/CSI/BEL bytes, bidi overrides, rich markup and newline forgeries
must come out of every human output escaped and visible, and out of JSON output as valid JSON
that decodes to the planted value.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any, cast

import docker
from rich.console import Console

from reconciler.cli import Context
from reconciler.kinds import ResourcePlan
from reconciler.output import print_plan, print_status_detail
from reconciler.textsafe import escape_control, safe_json
from state.keys import Key
from state.models import HistoryEntry, InventoryItem, ResourceStatus, utc_now
from state.store import Store
from tests.conftest import Cli
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

OSC_TITLE = "\x1b]0;pwned\x07"
CSI_CLEAR = "\x9b2J"
ESC_RED = "\x1b[31m"
BIDI = "\u202e"
FORGED_EVENT = "\n2026-12-04T00:00:00.000Z Normal  Deployment/other Deleted: forged"
HOSTILE = f"m{OSC_TITLE}{CSI_CLEAR}{ESC_RED}{BIDI}[bold]lit[/bold]{FORGED_EVENT}"
RAW_BYTES = ("\x1b", "\x9b", "\x07", BIDI)
EVENT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (Normal |Warning) \S+ ")


def _assert_clean(where: str, text: str) -> None:
    for raw in RAW_BYTES:
        assert raw not in text, f"{where}: raw {raw!r} reached the terminal:\n{text!r}"


def _plant(store: Store) -> None:
    status = ResourceStatus(resource="Deployment/vlm", kind="Deployment", name="vlm")
    status.set_condition("Ready", "False", "Hostile" + ESC_RED, HOSTILE)
    status.facts["model"] = HOSTILE
    status.facts["host"] = "local" + OSC_TITLE
    status.inventory.append(InventoryItem(kind="container", name="rtvi-vlm", host="local",
                                          id="abc" + CSI_CLEAR, created_at=utc_now()))
    status.add_history(HistoryEntry(time=utc_now(), action="create", target="container x",
                                    cause=HOSTILE, result="ok"))
    store.save(status)
    store.events.append(Key("Deployment", "vlm"), "Warning", "Hostile", HOSTILE)
    store.events.append(Key("Deployment", "vlm"), "Normal", "Created", "second " + OSC_TITLE)


def test_planted_state_is_escaped_in_status_and_events(cli: Cli, state_dir: Path) -> None:
    _plant(Store(state_dir))
    table = cli("status")
    detail = cli("status", "vlm")
    text_events = cli("events")
    for where, done in (("status", table), ("status NAME", detail), ("events", text_events)):
        assert done.returncode == 0, done.stderr
        _assert_clean(where, done.stdout + done.stderr)
    # Escaped, visible and literal: the reader sees what was planted, markup not applied.
    assert "\\x1b]0;pwned\\x07" in detail.stdout
    assert "\\x9b2J" in detail.stdout
    assert "[bold]lit[/bold]" in table.stdout
    assert "[bold]lit[/bold]" in detail.stdout
    # The forged line stays inside its own event: two events, two lines, both real.
    lines = text_events.stdout.splitlines()
    assert len(lines) == 2, lines
    assert all(EVENT_LINE.match(line) for line in lines), lines
    assert "\\n2026-12-04T00:00:00.000Z Normal  Deployment/other Deleted: forged" in lines[0]

    for args in (("status", "-o", "json"), ("status", "vlm", "-o", "json"),
                 ("events", "-o", "json")):
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        _assert_clean(" ".join(args), done.stdout + done.stderr)
    detail_json = json.loads(cli("status", "vlm", "-o", "json").stdout)
    assert detail_json["facts"]["model"] == HOSTILE  # valid JSON, the value itself intact
    events_json = [json.loads(line) for line in cli("events", "-o", "json").stdout.splitlines()]
    assert [e["message"] for e in events_json] == [HOSTILE, "second " + OSC_TITLE]


def test_error_messages_are_escaped(cli: Cli, tmp_path: Path) -> None:
    hostile = tmp_path / f"spec{OSC_TITLE}.yaml"
    done = cli("validate", str(hostile))
    assert done.returncode == 1
    _assert_clean("validate error", done.stdout + done.stderr)
    assert "spec\\x1b]0;pwned\\x07.yaml" in done.stderr


def test_plan_and_detail_printers_escape_every_field() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, highlight=False, emoji=False)
    refused: ResourcePlan[Any, Any] = ResourcePlan(
        resource=cast(Key, "Deployment/x" + ESC_RED), name="x").refuse(HOSTILE, "Hostile")
    print_plan(console, [refused])
    status = ResourceStatus(resource="Deployment/x", kind="Deployment", name="x",
                            source_file="specs" + OSC_TITLE + "[red]f[/red].yaml")
    print_status_detail(console, status)
    _assert_clean("plan + detail", buffer.getvalue())
    assert "[red]f[/red]" in buffer.getvalue()


def test_daemon_say_and_progress_lines_are_escaped(tmp_path: Path) -> None:
    ctx = Context(tmp_path, None, verbose=False)
    buffer = io.StringIO()
    ctx.err = Console(file=buffer, width=200, highlight=False, emoji=False, soft_wrap=True)
    ctx.say(f"reconciled: {HOSTILE}")
    ctx.progress("Deployment/x" + OSC_TITLE, HOSTILE)
    _assert_clean("say/progress", buffer.getvalue())
    assert len(buffer.getvalue().splitlines()) == 2  # one line each, no forged second line


def test_escape_helpers() -> None:
    assert escape_control("a\x1b[1mb\x9bc\x7fd\x00e\tf") == "a\\x1b[1mb\\x9bc\\x7fd\\x00e\tf"
    assert escape_control("one\ntwo\r") == "one\\ntwo\\r"
    assert escape_control("one\ntwo\x1b", keep_newlines=True) == "one\ntwo\\x1b"
    assert escape_control("x\u202ey\u2066z\u2028") == "x\\u202ey\\u2066z\\u2028"
    encoded = safe_json(json.dumps({"m": HOSTILE}, ensure_ascii=False, indent=2))
    _assert_clean("json", encoded)
    assert json.loads(encoded) == {"m": HOSTILE}


def _escaped(text: str) -> str:
    """The emulator's ``escaped:`` form: env values may not carry control bytes (validate
    refuses them), but what a service prints may."""
    return "escaped:" + text.encode("unicode_escape").decode("ascii")


def test_real_model_id_log_line_and_label_reach_no_terminal_raw(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """Through the real CLI: a service whose /v1/models lists a hostile model ID, one whose log
    carries a fatal marker with control bytes, and a foreign container with a hostile label."""
    specs = tmp_path / "specs"
    fatal = {"RTVI_EMU_FATAL": _escaped(f"CUDA out of memory {OSC_TITLE}{CSI_CLEAR}{BIDI}"),
             "RTVI_EMU_STARTUP_DELAY_S": 600}
    write(specs, deployment("model", pinned(emulator_image), free_port(),
                            env={"RTVI_EMU_MODEL_ID": _escaped(f"evil{OSC_TITLE}{ESC_RED}{BIDI}")}),
          deployment("logs", pinned(emulator_image), free_port(), env=fatal),
          deployment("taken", pinned(emulator_image), free_port()))
    foreign = docker_client.containers.run(
        emulator_image, name=f"rtvi-{instance}-taken", detach=True, init=True,
        labels={"rtvi.test": "1", "rtvi.reconciler/resource": f"x{OSC_TITLE}{CSI_CLEAR}"})
    try:
        plan = cli("plan", str(specs))
        _assert_clean("plan", plan.stdout + plan.stderr)
        assert "Conflict" in plan.stdout
        assert "\\x1b]0;pwned\\x07" in plan.stdout

        applied = cli("apply", str(specs))
        assert applied.returncode == 1
        _assert_clean("apply", applied.stdout + applied.stderr)
        assert "serving evil\\x1b]0;pwned\\x07\\x1b[31m\\u202e" in applied.stdout
        assert "CUDA out of memory \\x1b]0;pwned\\x07\\x9b2J\\u202e" in applied.stdout

        for args in (("status",), ("status", "model"), ("status", "logs"), ("events",),
                     ("events", "-o", "json"), ("status", "-o", "json")):
            done = cli(*args)
            _assert_clean(" ".join(args), done.stdout + done.stderr)
        model = json.loads(cli("status", "model", "-o", "json").stdout)["facts"]["model"]
        assert model == f"evil{OSC_TITLE}{ESC_RED}{BIDI}"

        deleted = cli("delete", str(specs))
        _assert_clean("delete", deleted.stdout + deleted.stderr)
        foreign.reload()
        assert foreign.status == "running"  # never ours, never touched
    finally:
        foreign.remove(force=True)
