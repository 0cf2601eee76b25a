"""The port validation's quality gates on answers written by hand (pure)."""

from __future__ import annotations

import pytest

from controllers.kinds.experiments.portvalidation.quality import judge


@pytest.mark.parametrize("answer", [
    "The frame shows a solid red square.",
    "A red frame with a BLACK border fills the whole picture.",
    "Red.",
    "Der Rahmen ist rot und zeigt nichts weiter.",  # other languages are words too
    "Line one\nline two\twith a tab.",
])
def test_clean_answers_pass(answer: str) -> None:
    assert judge(answer, "stop") == []


@pytest.mark.parametrize(("answer", "finish", "gate"), [
    ("   \n", "stop", "empty"),
    ("The frame shows a solid r", "length", "truncated"),
    ("red red red red red red red red", "stop", "repetitive"),
    ("it is red and it is red and it is red and done", "stop", "repetitive"),
    ("The frame\ufffd shows red", "stop", "invalid-unicode"),
    ("The frame \x07 shows red", "stop", "invalid-unicode"),
    ("xq zvbkt rrpq qwlmn shows", "stop", "gibberish"),
    ('data: {"choices": []}', "stop", "transport-framing"),
    ('{"id": "chatcmpl-1", "object": "chat.completion"}', "stop", "transport-framing"),
    ("The frame shows red [DONE]", "stop", "transport-framing"),
])
def test_each_gate_fails_its_kind_of_answer(answer: str, finish: str, gate: str) -> None:
    assert gate in {f.gate for f in judge(answer, finish)}


def test_grounding_needs_every_fact_as_whole_words_and_no_absent_one() -> None:
    assert judge("The frame shows red.", "stop", ["red"], ["green"]) == []
    [missing] = judge("The frame shows a reddish tone.", "stop", ["red"])
    assert missing.problem == "missing what the input shows: red"  # 'reddish' is not 'red'
    [invented] = judge("A red bus and a green tree.", "stop", ["red"], ["green tree", "cat"])
    assert invented.problem == "claims what the input does not show: green tree"
    assert judge("red solid", "stop", ["solid red"])[0].gate == "grounding"  # order counts
