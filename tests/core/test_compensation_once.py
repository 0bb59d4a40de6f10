"""One original, one compensation: refused ones send nothing, racing ones send once, the sender gets its receipt.

Each test checks the generic fake's effects (refunds sent) and the ledger rows, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from safe_effects import (
    EffectRecord,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    IllegalTransition,
    IntentNotFound,
    InvalidInput,
    Ledger,
    Receipt,
    RetryPolicy,
)
from safe_effects.testing import FakeClock, FakeFailure, GenericFakeAdapter, GenericFakeProvider, generic_contract

KEY = "invoice:inv_42:collect:v1"
REFUND_1 = "invoice:inv_42:refund:v1"
REFUND_2 = "invoice:inv_42:refund:v2"
CHARGE = EffectRequest(operation="charge", params={"amount": 2000})
REFUND = EffectRequest(operation="refund", params={"charge": "fx_1"})
NO_WAIT = RetryPolicy(initial_wait=0.0, max_wait=0.05)


@dataclass
class HeldRefunds(GenericFakeAdapter):
    """Holds the first refund on the wire until released: a slow provider call another worker can race."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        if request.operation == "refund" and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10)
        return super().dispatch(request, provider_key)


@dataclass
class Env:
    ledger: Ledger
    fake: GenericFakeProvider
    clock: FakeClock
    open: Callable[..., Ledger]

    def refunds(self) -> list[str]:
        return [effect.key for effect in self.fake.effects() if "refund" in effect.key]

    def other_worker(self) -> Ledger:
        return self.open(clock=self.clock, retry=NO_WAIT)


@pytest.fixture
def env(open_ledger: Callable[..., Ledger], tmp_path: Path) -> Env:
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock)
    return Env(open_ledger(clock=clock, retry=NO_WAIT), fake, clock, open_ledger)


def test_two_racing_compensations_with_different_keys_refund_once(env: Env) -> None:
    adapter = HeldRefunds(env.fake, generic_contract())
    env.ledger.execute(adapter, CHARGE, intent_key=KEY)
    outcomes: dict[str, object] = {}

    def first() -> None:
        try:
            outcomes["first"] = env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1)
        except Exception as error:  # the assertions below say which outcome was expected
            outcomes["first"] = error

    thread = threading.Thread(target=first)
    thread.start()
    assert adapter.entered.wait(10)  # refund v1 is on the wire
    with pytest.raises(IllegalTransition, match=rf"compensation '{REFUND_1}' holds it \(in_flight\)"):
        env.other_worker().compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_2)
    adapter.release.set()
    thread.join(10)

    assert isinstance(outcomes["first"], Receipt)
    assert env.refunds() == [f"default/{REFUND_1}"]
    original = env.ledger.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, REFUND_1)
    with pytest.raises(IntentNotFound):  # the refusal wrote nothing
        env.ledger.get(REFUND_2)
    with pytest.raises(IllegalTransition, match=rf"already compensated by '{REFUND_1}'; one original gets one"):
        env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_2)  # named, not just refused
    assert env.refunds() == [f"default/{REFUND_1}"]


def test_a_second_key_is_refused_while_the_first_compensation_is_unknown(env: Env) -> None:
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    env.ledger.execute(adapter, CHARGE, intent_key=KEY)
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # refund v1 happened, its answer was lost
    with pytest.raises(EffectUnknown):
        env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1)
    held = env.ledger.get(KEY)
    assert (held.status, held.compensated_by) == (EffectStatus.CONFIRMED, REFUND_1)  # named, not yet compensated

    with pytest.raises(IllegalTransition, match=r"holds it \(unknown\); settle that one first"):
        env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_2)
    with pytest.raises(IntentNotFound):  # the refusal wrote nothing
        env.ledger.get(REFUND_2)
    assert env.ledger.reconcile(adapter, intent_key=REFUND_1).status is EffectStatus.CONFIRMED

    assert env.refunds() == [f"default/{REFUND_1}"]
    assert env.ledger.get(KEY).status is EffectStatus.COMPENSATED


def test_a_rejected_compensation_may_be_replaced_by_another_key(env: Env) -> None:
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    env.ledger.execute(adapter, CHARGE, intent_key=KEY)
    env.fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectRejected):
        env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1)
    assert env.ledger.get(KEY).status is EffectStatus.CONFIRMED

    receipt = env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_2)

    assert receipt.record.compensates == KEY
    assert env.refunds() == [f"default/{REFUND_2}"]
    original = env.ledger.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, REFUND_2)


def test_a_compensating_key_recorded_as_something_else_is_refused_before_sending(env: Env) -> None:
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    env.ledger.execute(adapter, CHARGE, intent_key=KEY)
    env.ledger.prepare(adapter, REFUND, intent_key=REFUND_1)  # recorded as a plain intent first

    with pytest.raises(IllegalTransition, match=r"already recorded as a plain intent"):
        env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1)

    assert env.refunds() == []
    original = env.ledger.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.CONFIRMED, None)
    assert env.ledger.get(REFUND_1).status is EffectStatus.PREPARED


@pytest.mark.parametrize(
    ("compensates", "message"),
    [
        ("invoice-42", "compensates: intent key .invoice-42. needs at least 4 parts"),
        (REFUND_1, "cannot compensate itself"),
    ],
    ids=["malformed", "itself"],
)
def test_a_bad_compensates_is_refused_before_anything_is_written_or_sent(
    env: Env, compensates: str, message: str
) -> None:
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    with pytest.raises(InvalidInput, match=message):
        env.ledger.execute(adapter, REFUND, intent_key=REFUND_1, compensates=compensates)  # type: ignore[arg-type]
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []
    assert env.fake.requests() == []


def test_the_worker_that_sent_the_refund_gets_its_receipt_when_another_caller_marked_first(env: Env) -> None:
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    other = env.other_worker()
    answered: list[Receipt] = []

    def interleaving_clock():  # type: ignore[no-untyped-def]
        """Between the sender reading the original and marking it, a second caller of the same compensation."""
        if "mark_original_compensated" in (frame.function for frame in inspect.stack()[1:3]) and not answered:
            answered.append(other.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1))
        return env.clock()

    sender = env.open(clock=interleaving_clock, retry=NO_WAIT)
    sender.execute(adapter, CHARGE, intent_key=KEY)

    receipt = sender.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1)

    assert len(answered) == 1
    assert answered[0].from_ledger  # the second caller answered from the ledger, and marked the original
    assert not receipt.from_ledger
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert env.refunds() == [f"default/{REFUND_1}"]
    original = sender.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, REFUND_1)


def named_by_a_lost_worker(env: Env, adapter: GenericFakeAdapter) -> None:
    """A confirmed charge whose original names REFUND_1, by a worker lost before it recorded REFUND_1."""
    confirmed = env.ledger.execute(adapter, CHARGE, intent_key=KEY).record
    env.ledger.store.transition(  # what the lost worker managed to write
        confirmed,
        EffectStatus.CONFIRMED,
        now=env.clock(),
        actor="lost-worker",
        reason=f"compensation {REFUND_1} about to be sent",
        changes={"compensated_by": REFUND_1},
    )


def test_a_name_whose_compensation_was_never_recorded_is_resumed_by_its_own_key(env: Env) -> None:
    """A worker lost between naming its compensation and recording it: another key is refused (the named
    one could still be sent by its key); running the named compensation again sends it once."""
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    named_by_a_lost_worker(env, adapter)
    env.clock.advance(env.ledger.lease.duration * 10)  # however long ago: the name stays its key's
    with pytest.raises(IllegalTransition, match=rf"'{REFUND_1}' holds it \(named, never recorded: run it again"):
        env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_2)

    env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1)

    assert env.refunds() == [f"default/{REFUND_1}"]
    original = env.ledger.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, REFUND_1)
    with pytest.raises(IntentNotFound):
        env.ledger.get(REFUND_2)


def test_a_key_recorded_as_a_plain_intent_while_being_named_leaves_the_original_free(env: Env) -> None:
    """The race: the key is free when checked, a plain intent takes it before the compensating record is
    written. The compensation is refused, sends nothing, and its name is taken off the original."""
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    env.ledger.execute(adapter, CHARGE, intent_key=KEY)
    other = env.other_worker()
    raced: list[object] = []

    def plain_intent_meanwhile(record: EffectRecord, **kwargs: object) -> tuple[EffectRecord, bool]:
        if record.intent_key == REFUND_1 and not raced:
            raced.append(other.execute(adapter, REFUND, intent_key=REFUND_1))  # a plain intent, sent and confirmed
        return original_insert(record, **kwargs)  # type: ignore[arg-type]

    original_insert = env.ledger.store.insert_if_absent
    env.ledger.store.insert_if_absent = plain_intent_meanwhile  # type: ignore[method-assign]
    with pytest.raises(IllegalTransition, match="already recorded as a plain intent"):
        env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_1)
    env.ledger.store.insert_if_absent = original_insert  # type: ignore[method-assign]

    original = env.ledger.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.CONFIRMED, None)
    assert env.refunds() == [f"default/{REFUND_1}"]  # the plain intent's own send, nothing more
    env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_2)
    assert env.ledger.get(KEY).compensated_by == REFUND_2


def test_a_name_whose_key_was_then_taken_by_a_plain_intent_can_be_replaced(env: Env) -> None:
    """A worker lost between naming REFUND_1 and recording it; later REFUND_1 is used as a plain intent. The
    name can then never be completed by its key, so another compensation may replace it."""
    adapter = GenericFakeAdapter(env.fake, generic_contract())
    named_by_a_lost_worker(env, adapter)
    env.ledger.execute(adapter, REFUND, intent_key=REFUND_1)  # the key, now a plain intent

    env.ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=REFUND_2)

    original = env.ledger.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, REFUND_2)
    assert env.refunds() == [f"default/{REFUND_1}", f"default/{REFUND_2}"]  # the plain intent's, then ours
