"""The prune guard's judgement, case by case (pure: sets of names in, a verdict out)."""

from __future__ import annotations

import pytest

from reconciler.pruneguard import R_EMPTY, R_MASS_PRUNE, PrunePolicy, judge

DEFAULT = PrunePolicy()


def keys(n: int, kind: str = "Deployment") -> list[str]:
    return [f"{kind}/d{i}" for i in range(n)]


@pytest.mark.parametrize(("owned", "kept", "reason"), [
    (1, 0, R_MASS_PRUNE),  # the only Deployment renamed away: all of them
    (2, 1, ""),  # one of two: an ordinary change
    (4, 0, R_MASS_PRUNE),
    (4, 1, ""),  # 3 of 4: a small fleet may shrink
    (5, 2, R_MASS_PRUNE),  # 3 of 5 > half
    (5, 3, ""),  # 2 of 5
    (10, 5, ""),  # exactly half is allowed
    (10, 4, R_MASS_PRUNE),
])
def test_share_of_prunes(owned: int, kept: int, reason: str) -> None:
    desired = [*keys(kept), "Host/local", "Deployment/new"]
    verdict = judge(keys(owned), desired, "sha256:ab", DEFAULT)
    assert verdict.reason == reason
    assert len(verdict.prunes) == owned - kept and verdict.owned == owned


def test_an_empty_revision_is_held_and_says_what_it_would_delete_and_how_to_allow() -> None:
    verdict = judge(keys(3), [], "sha256:ab", DEFAULT)
    assert verdict.held and verdict.reason == R_EMPTY
    assert "Deployment/d0, Deployment/d1, Deployment/d2" in verdict.message
    assert "reconciler sync --approve-prune sha256:ab" in verdict.message
    assert "--allow-empty" in verdict.message


def test_an_empty_revision_with_nothing_owned_is_fine() -> None:
    assert not judge([], [], "r", DEFAULT).held


def test_opt_ins() -> None:
    assert not judge(keys(3), [], "r", PrunePolicy(allow_empty=True)).held
    assert judge(keys(3), [], "r", PrunePolicy(allow_mass_prune=True)).reason == R_EMPTY
    assert not judge(keys(3), ["Host/local"], "r", PrunePolicy(allow_mass_prune=True)).held
    assert not judge(keys(3), [], "r", DEFAULT, approved=True).held
    assert judge(keys(10), keys(7), "r", PrunePolicy(max_share=0.2)).reason == R_MASS_PRUNE
    assert not judge(keys(10), keys(8), "r", PrunePolicy(max_share=0.2)).held


def test_long_lists_are_shortened() -> None:
    verdict = judge(keys(30), ["Host/local"], "r", DEFAULT)
    assert "and 20 more" in verdict.message and len(verdict.prunes) == 30
