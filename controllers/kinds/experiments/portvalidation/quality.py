"""The automatic quality gates of a model port (``rules.md``, portValidation): pure.

A model that loads is not a port that works (BYOM porting, hard gates): every answer of the
smoke and accuracy rows is judged here, and any finding fails its row. What each gate catches:

- ``empty``: nothing but whitespace.
- ``truncated``: the service stopped at its token limit (``finish_reason: length``).
- ``repetitive``: the same few words looping (few distinct words, or one word-trigram three
  times or more).
- ``invalid-unicode``: lone surrogates, U+FFFD replacement characters, or control characters
  (a decoder or detokenizer problem, never content).
- ``gibberish``: token soup — most word-like groups have no vowel, or no word is longer than
  a fragment.
- ``transport-framing``: SSE or JSON framing where the content should be (``data: ...``,
  ``[DONE]``, a ``chat.completion`` body): the adapter passed the transport through.
- ``grounding``: a fact the input shows is missing from the answer, or a fact it does not show
  is claimed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from specs.experiments.portvalidation import words

VOWELS = set("aeiouyAEIOUY")
FRAMING = re.compile(r"(^|\n)\s*data:\s|\[DONE\]|\"object\"\s*:\s*\"chat\.completion|"
                     r"^\s*\{\s*\"(choices|id)\"\s*:")

MIN_WORDS_FOR_RATIOS = 6
MIN_DISTINCT_RATIO = 0.35
TRIGRAM_REPEATS = 3
VOWELLESS_RATIO = 0.5
ALLOWED_CONTROLS = "\n\t\r"


@dataclass(frozen=True)
class Finding:
    gate: str
    problem: str


def judge(text: str, finish_reason: str | None, facts: Sequence[str] = (),
          absent: Sequence[str] = ()) -> list[Finding]:
    """Every quality problem of one answer ([] when it is clean). ``facts``: words or phrases
    the input shows (each must be in the answer); ``absent``: ones it does not (none may be)."""
    found: list[Finding] = []
    if not text.strip():
        return [Finding("empty", "the answer is empty")]
    if finish_reason == "length":
        found.append(Finding("truncated", "the answer stopped at the token limit "
                             "(finish_reason: length)"))
    bad = [c for c in text if 0xD800 <= ord(c) <= 0xDFFF or c == "\ufffd"
           or (ord(c) < 0x20 and c not in ALLOWED_CONTROLS) or 0x7F <= ord(c) < 0xA0]
    if bad:
        shown = ", ".join(f"U+{ord(c):04X}" for c in sorted(set(bad))[:4])
        found.append(Finding("invalid-unicode", f"{len(bad)} invalid character(s): {shown}"))
    if FRAMING.search(text):
        found.append(Finding("transport-framing", "transport framing in the content (SSE "
                             "'data:' lines, [DONE] or a chat.completion body)"))
    said = words(text)
    found += _wording(said)
    lowered = " ".join(said)
    missing = [f for f in facts if not _has(lowered, f)]
    if missing:
        found.append(Finding("grounding", "missing what the input shows: " + ", ".join(missing)))
    invented = [f for f in absent if _has(lowered, f)]
    if invented:
        found.append(Finding("grounding", "claims what the input does not show: "
                             + ", ".join(invented)))
    return found


def _wording(said: list[str]) -> list[Finding]:
    """Repetition (few distinct words, a trigram over and over) and gibberish (words without
    vowels) in an answer's words."""
    found: list[Finding] = []
    if len(said) >= MIN_WORDS_FOR_RATIOS:
        if len(set(said)) / len(said) < MIN_DISTINCT_RATIO:
            found.append(Finding("repetitive", f"{len(set(said))} distinct word(s) in "
                                 f"{len(said)}"))
        else:
            trigram, count = max(Counter(zip(said, said[1:], said[2:], strict=False))
                                 .items(), key=lambda kv: kv[1], default=((), 0))
            if count >= TRIGRAM_REPEATS:
                found.append(Finding("repetitive", f"{' '.join(trigram)!r} {count} times"))
    letters = [w for w in said if len(w) >= 2]
    if letters:
        vowelless = [w for w in letters if not set(w) & VOWELS]
        if len(vowelless) / len(letters) >= VOWELLESS_RATIO and len(letters) >= 3:
            found.append(Finding("gibberish", f"{len(vowelless)} of {len(letters)} word(s) "
                                 f"have no vowel ({' '.join(vowelless[:4])})"))
    return found


def _has(lowered_words: str, phrase: str) -> bool:
    """Whether every word of ``phrase`` appears, in order, as whole words."""
    wanted = " ".join(words(phrase))
    return bool(wanted) and re.search(rf"(^| ){re.escape(wanted)}( |$)", lowered_words) is not None
