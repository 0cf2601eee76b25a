"""The prune guard's judgement, case by case (pure: sets of names in, a verdict out)."""

from __future__ import annotations

import pytest

from reconciler.pruneguard import R_EMPTY, R_MASS_PRUNE, SHOWN_NAMES, PrunePolicy, Verdict, judge

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
    assert len(verdict.prunes) == owned - kept
    assert verdict.owned == owned


def test_an_empty_revision_is_held_and_says_what_it_would_delete_and_how_to_allow() -> None:
    verdict = judge(keys(3), [], "sha256:ab", DEFAULT)
    assert verdict.held
    assert verdict.reason == R_EMPTY
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
    assert "and 20 more" in verdict.message
    assert len(verdict.prunes) == 30


def test_verdicts_name_what_they_prune_and_of_how_many() -> None:
    """Every verdict, held or not, carries the keys it prunes and the owned count (the daemon
    logs and shows them)."""
    prunes = ("Deployment/d0", "Deployment/d1")
    assert judge(keys(2), [], "r", DEFAULT, approved=True) == Verdict(prunes, 2)
    assert judge(keys(3), keys(3)[2:], "r", DEFAULT) == Verdict(prunes, 3)
    empty = judge(keys(2), [], "r", DEFAULT)
    assert (empty.prunes, empty.owned) == (prunes, 2)


def test_held_messages_say_exactly_what_and_how() -> None:
    empty = judge(keys(2), [], "sha256:ab", DEFAULT)
    assert empty.message == (
        "revision sha256:ab has no resources while 2 are owned; it would delete "
        "Deployment/d0, Deployment/d1. Held: an empty revision is far more often a mistake "
        "(a folder emptied or replaced) than a wish; to apply it anyway, run `reconciler sync "
        "--approve-prune sha256:ab` once, or restart the daemon with --allow-empty")
    mass = judge(keys(SHOWN_NAMES + 1), ["Host/local"], "sha256:cd", DEFAULT)
    shown = ", ".join(sorted(keys(SHOWN_NAMES + 1))[:SHOWN_NAMES])  # d10 before d2
    assert mass.message == (
        f"revision sha256:cd would delete 11 of 11 owned resources: {shown} and 1 more. "
        "Held: more than 50% (or all) of a fleet at once needs an opt-in; to apply it anyway, "
        "run `reconciler sync --approve-prune sha256:cd` once, or restart the daemon with "
        "--allow-mass-prune")
    exactly = judge(keys(SHOWN_NAMES), ["Host/local"], "r", DEFAULT)
    assert exactly.message.split(": ", 1)[1].startswith(
        ", ".join(keys(SHOWN_NAMES)) + ". Held:")  # ten names: no "and 0 more"
