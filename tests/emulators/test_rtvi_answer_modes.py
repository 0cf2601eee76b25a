"""The RTVI emulator's answer modes: each way a ported model can answer badly, and the quality
gates that catch it. Served in-process (``tests/inproc_rtvi.py``): text chat needs no decoding.
"""

from __future__ import annotations

import httpx
import pytest

from controllers.kinds.experiments.portvalidation import quality
from emulators.rtvi.config import ANSWER_MODES
from tests.inproc_rtvi import ask, inproc_rtvi

PROMPT = "Reply with exactly these three words: green apple river."
FACTS = ["green", "apple", "river"]
CAUGHT_BY = {"normal": set(), "gibberish": {"gibberish", "grounding"},
             "repetition": {"repetitive", "grounding"}, "empty": {"empty"},
             "truncated": {"truncated", "grounding"}, "invalid_unicode": {"invalid-unicode"},
             "sse_framing": {"transport-framing"}, "ungrounded": {"grounding"}}


def test_every_answer_mode_is_known_to_the_gates() -> None:
    assert set(CAUGHT_BY) == set(ANSWER_MODES)


@pytest.mark.parametrize("mode", ANSWER_MODES)
def test_each_answer_mode_is_caught_by_its_gate_and_only_normal_passes(mode: str) -> None:
    answer = ask(PROMPT, RTVI_EMU_ANSWER_MODE=mode)
    gates = {f.gate for f in quality.judge(answer.content, answer.finish_reason, FACTS,
                                           ["elephant"])}
    assert gates == CAUGHT_BY[mode], (mode, answer.content, gates)


def test_the_answer_mode_changes_at_run_time_and_refuses_an_unknown_one() -> None:
    with inproc_rtvi() as rtvi:
        changed = httpx.post(f"{rtvi.url}/emulator/knobs", json={"answer_mode": "empty"})
        assert changed.status_code == 200
        assert changed.json()["answer_mode"] == "empty"
        refused = httpx.post(f"{rtvi.url}/emulator/knobs", json={"answer_mode": "poetry"})
        assert refused.status_code == 422
        assert "answer_mode" in refused.text
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        chat = httpx.post(f"{rtvi.url}/v1/chat/completions", json=body).json()
        assert chat["choices"][0]["message"]["content"] == ""


def test_the_file_hang_knob_changes_at_run_time_and_refuses_a_negative_value() -> None:
    """(The hang itself, on a real uploaded clip, is in tests/e2e/test_benchmark.py.)"""
    with inproc_rtvi() as rtvi:
        assert httpx.post(f"{rtvi.url}/emulator/knobs",
                          json={"file_hang_s": 2}).json()["file_hang_s"] == 2
        refused = httpx.post(f"{rtvi.url}/emulator/knobs", json={"file_hang_s": -1})
        assert refused.status_code == 422
