"""How chat completions answer (the ``answer_mode`` knob): the failures a model port shows.

A ported model that loads can still answer badly; the port validation's quality gates must
catch each way. ``shape`` turns the emulator's grounded answer into one of them:

- ``normal``: the answer as it is.
- ``gibberish``: token soup — letters in word-like groups that form no words.
- ``repetition``: the answer's words looping.
- ``empty``: an empty string.
- ``truncated``: cut in the middle of a word, ``finish_reason: "length"``.
- ``invalid_unicode``: lone surrogates in the text (valid JSON escapes, invalid Unicode).
- ``sse_framing``: transport framing (``data: {...}`` lines and ``[DONE]``) as the content.
- ``ungrounded``: fluent, but about things the input does not show.
"""

from __future__ import annotations

import json

GIBBERISH = "xq zvbkt rrpq qwlmn vbnzx kkjhg trwq plmk zzxq"
UNGROUNDED = "The frame shows a purple elephant standing beside a red double-decker bus."


def shape(mode: str, answer: str) -> tuple[str, str]:
    """(content, finish_reason) of an answer under ``mode``."""
    if mode == "gibberish":
        return GIBBERISH, "stop"
    if mode == "repetition":
        words = answer.rstrip(".").split()[-2:] or ["again"]
        return " ".join(words * 12), "stop"
    if mode == "empty":
        return "", "stop"
    if mode == "truncated":
        return answer[: max(1, len(answer) * 2 // 3)].rstrip(" ."), "length"
    if mode == "invalid_unicode":
        return answer[:8] + "\udc80\ud800" + answer[8:], "stop"
    if mode == "sse_framing":
        event = {"choices": [{"index": 0, "delta": {"content": answer}}]}
        return f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n", "stop"
    if mode == "ungrounded":
        return UNGROUNDED, "stop"
    return answer, "stop"
