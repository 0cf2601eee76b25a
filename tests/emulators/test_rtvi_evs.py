"""The RTVI emulator's EVS pruning: prompt tokens lowered only when both EVS variables are set
(and the release does not ignore them). Served in-process: text chat needs no decoding."""

from __future__ import annotations

import pytest

from tests.inproc_rtvi import ask

PROMPT = " ".join(f"word{i}" for i in range(20))


@pytest.mark.parametrize(("env", "tokens"), [
    ({}, 20),
    ({"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.5"}, 10),
    ({"VIA_EVS_SESSION": "1", "VLM_VIDEO_PRUNING_RATE": "0.25"}, 15),
    ({"VIA_EVS_SESSION": "true"}, 20),  # one of the two: nothing pruned
    ({"VLM_VIDEO_PRUNING_RATE": "0.5"}, 20),
    ({"VIA_EVS_SESSION": "false", "VLM_VIDEO_PRUNING_RATE": "0.5"}, 20),
    ({"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.5",
      "RTVI_EMU_EVS_IGNORED": "1"}, 20),
])
def test_prompt_tokens_are_pruned_only_with_both_evs_variables(env: dict[str, str],
                                                               tokens: int) -> None:
    answer = ask(PROMPT, **env)
    assert answer.raw["usage"]["prompt_tokens"] == tokens
