"""The prune guard: a revision that would delete most of the fleet is held, not applied.

A GitOps reconciler is trusted only if a bad save cannot delete a fleet. Reading problems are
refused earlier (an unreadable file or folder is no revision at all); this guard covers what
reads fine but is probably a mistake: a folder emptied or recreated (``mv specs old; mkdir
specs``), a branch reset to an empty commit, a file deleted in a bulk move. Argo CD's
``allowEmpty: false`` is the model: an empty revision while resources are owned, or one that
prunes more than a share of them, needs an explicit opt-in — a flag for the daemon's life, or a
one-time approval of that exact revision (``reconciler sync --approve-prune REVISION``).

Pure: it judges sets of names, so every branch is tested without Docker.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

DEFAULT_MAX_SHARE = 0.5
# At or below this many owned resources, only pruning all of them is held: losing one of two
# Deployments is an ordinary change, not a disaster.
SMALL_FLEET = 4
SHOWN_NAMES = 10
R_EMPTY = "EmptyRevision"
R_MASS_PRUNE = "MassPrune"


@dataclass(frozen=True)
class PrunePolicy:
    """How much one revision may delete without an opt-in."""

    allow_empty: bool = False
    allow_mass_prune: bool = False
    max_share: float = DEFAULT_MAX_SHARE


@dataclass(frozen=True)
class Verdict:
    """What a revision would prune and, when it is held, why (``reason`` is empty if not)."""

    prunes: tuple[str, ...]
    owned: int
    reason: str = ""
    message: str = ""

    @property
    def held(self) -> bool:
        return bool(self.reason)


def judge(owned: Collection[str], desired: Collection[str], revision: str,
          policy: PrunePolicy, approved: bool = False) -> Verdict:
    """Judge a revision that desires ``desired`` (every resource key in it) while ``owned``
    (keys of resources we created something for) exist; ``approved``: this exact revision was
    approved once by a person."""
    prunes = tuple(sorted(set(owned) - set(desired)))
    total = len(set(owned))
    if not prunes or approved:
        return Verdict(prunes, total)
    how = (f"to apply it anyway, run `reconciler sync --approve-prune {revision}` once, or "
           "restart the daemon with {flag}")
    if not desired and not policy.allow_empty:
        return Verdict(prunes, total, R_EMPTY,
                       f"revision {revision} has no resources while {total} are owned; it "
                       f"would delete {_names(prunes)}. Held: an empty revision is far more "
                       "often a mistake (a folder emptied or replaced) than a wish; "
                       + how.format(flag="--allow-empty"))
    too_many = len(prunes) == total or (
        total > SMALL_FLEET and len(prunes) > policy.max_share * total)
    if too_many and not policy.allow_mass_prune and desired:
        return Verdict(prunes, total, R_MASS_PRUNE,
                       f"revision {revision} would delete {len(prunes)} of {total} owned "
                       f"resources: {_names(prunes)}. Held: more than "
                       f"{policy.max_share:.0%} (or all) of a fleet at once needs an opt-in; "
                       + how.format(flag="--allow-mass-prune"))
    return Verdict(prunes, total)


def _names(keys: tuple[str, ...]) -> str:
    shown = ", ".join(keys[:SHOWN_NAMES])
    more = len(keys) - SHOWN_NAMES
    return shown + (f" and {more} more" if more > 0 else "")
