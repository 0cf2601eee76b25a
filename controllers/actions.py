"""One action a pass would take on a resource, with its cause: what ``plan`` prints, what a
controller carries out and records in the resource's history. One type for every kind."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    verb: str
    target: str
    cause: str
    item: str = ""  # the part of the resource it acts on, where it has parts (a source)

    def __str__(self) -> str:
        return f"{self.verb} {self.target}: {self.cause}"
