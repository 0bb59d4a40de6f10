"""The transition table, pinned: a change to what may follow what must be a deliberate edit here too."""

from __future__ import annotations

import itertools

import pytest

from safe_effects import TERMINAL, TRANSITIONS, UNSETTLED, EffectStatus, IllegalTransition, check_transition

S = EffectStatus
ALLOWED = {
    (S.PREPARED, S.IN_FLIGHT),
    (S.PREPARED, S.UNKNOWN),
    (S.PREPARED, S.REJECTED),  # an operator's withdrawal: nothing was sent
    (S.IN_FLIGHT, S.CONFIRMED),
    (S.IN_FLIGHT, S.REJECTED),
    (S.IN_FLIGHT, S.UNKNOWN),
    (S.IN_FLIGHT, S.PREPARED),
    (S.UNKNOWN, S.CONFIRMED),
    (S.UNKNOWN, S.REJECTED),
    (S.UNKNOWN, S.IN_FLIGHT),
    (S.UNKNOWN, S.PREPARED),
    (S.CONFIRMED, S.COMPENSATED),
    (S.CONFIRMED, S.CONFIRMED),
    (S.REJECTED, S.CONFIRMED),
}


def table() -> set[tuple[S, S]]:
    return {(source, target) for source, targets in TRANSITIONS.items() for target in targets}


def test_every_status_has_a_row_and_the_table_is_pinned() -> None:
    assert set(TRANSITIONS) == set(S)
    assert table() == ALLOWED


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)), ids=lambda s: s.value)
def test_check_transition_follows_the_table(source: S, target: S) -> None:
    if (source, target) in ALLOWED:
        check_transition(source, target, "invoice:inv_1:collect:v1")
        return
    with pytest.raises(IllegalTransition) as caught:
        check_transition(source, target, "invoice:inv_1:collect:v1")
    assert (caught.value.source, caught.value.target) == (source.value, target.value)
    assert caught.value.intent_key == "invoice:inv_1:collect:v1"
    assert str(caught.value) == f"illegal transition {source} -> {target} for intent 'invoice:inv_1:collect:v1'"


def test_terminal_and_unsettled_partition_the_statuses() -> None:
    assert set(S) == TERMINAL | UNSETTLED
    assert not TERMINAL & UNSETTLED


def test_the_terminal_states_are_left_only_by_compensation_or_a_correction() -> None:
    """CONFIRMED -> CONFIRMED names the compensation about to run; COMPENSATED follows once it is confirmed.
    REJECTED -> CONFIRMED is an operator's correction on the provider's own evidence that it acted."""
    assert {(s, t) for s, t in table() if s in TERMINAL} == {
        (S.CONFIRMED, S.COMPENSATED),
        (S.CONFIRMED, S.CONFIRMED),
        (S.REJECTED, S.CONFIRMED),
    }


def test_unknown_is_reached_from_a_dispatch_or_from_a_reopened_intent_past_its_key_window() -> None:
    assert {s for s, t in table() if t is S.UNKNOWN} == {S.IN_FLIGHT, S.PREPARED}


def test_message_without_a_key() -> None:
    with pytest.raises(IllegalTransition, match=r"^illegal transition rejected -> prepared$"):
        check_transition(S.REJECTED, S.PREPARED)
