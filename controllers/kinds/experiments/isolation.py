"""The semantic-isolation judgement (``rules.md``, canary): pure, so every verdict is testable.

Each source has a label (``red``, ``red border``, ``tabby cat``). An answer is source-correct
when it contains every token of its own label and not the full token set of any other label:
"The frame shows RED with a BLACK border." is correct for ``red border`` and wrong for ``red
solid``. Every source must give ``needed`` correct answers; the first ``needed`` answers that
saw frames are judged, in order, and one wrong answer fails the source (a mixed stream answers
right half the time: "mostly right" is not isolation). An error inside a 200 answer, an empty
answer or too few answers fail closed too. A chunk in which no frame arrived is no answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controllers.kinds.streamset.caption_events import CaptionChunk

TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> frozenset[str]:
    return frozenset(TOKEN.findall(text.lower()))


def forced_choice_prompt(labels: Sequence[str]) -> str:
    """The forced-choice question every probe stream is asked (the same for all of them, so
    only the frames can make the answers differ)."""
    options = "; ".join(sorted(labels))
    return (f"Which one of these options describes the video: {options}? Answer with exactly "
            "one option, naming its words.")


def is_answer(chunk: CaptionChunk) -> bool:
    """A chunk that says something about frames (or fails): judged. No frames: no answer."""
    return bool(chunk.error) or chunk.frame_count is None or chunk.frame_count > 0


def judge_answer(answer: str, own: str, labels: Sequence[str]) -> str | None:
    """None when ``answer`` is source-correct for label ``own``; else what is wrong with it."""
    said = tokens(answer)
    if not said:
        return "empty answer"
    if not tokens(own) <= said:
        others = [label for label in labels if label != own and tokens(label) <= said]
        return (f"answered {answer!r}: that is {', '.join(others)}" if others
                else f"answered {answer!r}: not {own}")
    clash = [label for label in labels if label != own and tokens(label) <= said]
    if clash:
        return f"answered {answer!r}: also names {', '.join(clash)} (mixed)"
    return None


@dataclass
class SourceVerdict:
    source: str
    label: str
    answers: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def judge(answers: Mapping[str, Sequence[CaptionChunk]], labels: Mapping[str, str],
          needed: int) -> list[SourceVerdict]:
    """One verdict per source (in label order): its first ``needed`` answers, each judged."""
    all_labels = list(labels.values())
    verdicts = []
    for source, label in labels.items():
        verdict = SourceVerdict(source, label)
        judged = [c for c in answers.get(source, []) if is_answer(c)][:needed]
        for chunk in judged:
            verdict.answers.append(chunk.content)
            if chunk.error:
                verdict.problems.append(f"error inside a 200 answer: {chunk.error}")
            elif (why := judge_answer(chunk.content, label, all_labels)) is not None:
                verdict.problems.append(why)
        if len(judged) < needed:
            verdict.problems.append(f"missing answers: {len(judged)} of {needed} arrived")
        verdicts.append(verdict)
    return verdicts


def summary(verdicts: Sequence[SourceVerdict]) -> str:
    """One line naming every failed source and its first problem (or how many passed)."""
    failed = [v for v in verdicts if not v.passed]
    if not failed:
        return f"{len(verdicts)} source(s) each gave only source-correct answers"
    return "; ".join(f"{v.source} ({v.label}): {v.problems[0]}" for v in failed)
