"""Reconciliation decisions where one wrong branch sends twice or hides a second effect: a lookup that proves
nothing, an "absent" the contract does not trust, events that disagree, a late answer naming another object.
Each test names the mutant it kills. Real stores (SQLite, PostgreSQL); the generic fake records every request."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from safe_effects import (
    EffectRecord,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    InvalidInput,
    LeaseLost,
    Ledger,
    LookupResult,
    LookupStatus,
    Outcome,
    Verdict,
    purge_settled,
    request_digest,
)
from safe_effects.testing import FakeFailure, GenericFakeAdapter

from .test_executor import CHARGE, KEY, _event, make_env


def test_a_lookup_that_proves_absence_reopens_nothing_where_the_contract_forbids_redispatch(
    store_url: str, tmp_path: Path
) -> None:
    """A provider without keys whose lookup says "absent", under a contract that does not trust that answer
    (``redispatch_when_proven_absent=False``): the unknown stays unknown and nothing is sent again. Mutant:
    ``may_reopen_when_absent`` ignoring the flag sends the intent a second time."""
    env = make_env(store_url, tmp_path, dedupe=False, proves_absence=True)
    env.adapter = GenericFakeAdapter(
        env.fake, env.adapter.contract.model_copy(update={"redispatch_when_proven_absent": False})
    )
    env.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert env.ledger.reconcile(env.adapter, intent_key=KEY).status is EffectStatus.UNKNOWN
    with pytest.raises(EffectUnknown, match="was not resent"):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert len(env.fake.requests()) == 1  # the lost request only: never sent again
    assert env.fake.effects() == []
    assert env.record().status is EffectStatus.UNKNOWN
    assert [a.to_status for a in env.ledger.store.audit_trail("default", KEY)] == ["unknown"]


class _LookupDown(GenericFakeAdapter):
    """The provider's search is down (a 503, a revoked key): every lookup raises."""

    def lookup(self, record: EffectRecord) -> LookupResult:
        raise ConnectionError("search unavailable")


def test_a_lookup_that_raises_proves_nothing_and_nothing_is_resent(store_url: str, tmp_path: Path) -> None:
    """A keyless provider whose lookups can prove absence, but this lookup failed: that is no proof, the intent
    stays unknown and is not sent again. Mutant: a failing lookup taken as "absent" sends a second charge."""
    env = make_env(store_url, tmp_path, dedupe=False, proves_absence=True)
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # it acted; the answer was lost
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    down = _LookupDown(env.fake, env.adapter.contract)

    record = env.ledger.reconcile(down, intent_key=KEY)
    assert record.status is EffectStatus.UNKNOWN
    with pytest.raises(EffectUnknown, match="was not resent"):
        env.ledger.execute(down, CHARGE, intent_key=KEY)

    assert len(env.fake.requests()) == 1
    assert len(env.fake.effects()) == 1
    assert env.record().status is EffectStatus.UNKNOWN


@dataclass
class _EventsDuringTheCall(GenericFakeAdapter):
    """Webhook events reach the ledger while the worker still waits for its answer (they decide nothing yet)."""

    ledger: Ledger | None = None
    events: tuple[Evidence, ...] = ()

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        try:
            return GenericFakeAdapter.dispatch(self, request, provider_key)
        finally:
            assert self.ledger is not None
            for event in self.events:
                assert self.ledger.record_evidence(event)
            assert self.ledger.get(KEY).status is EffectStatus.IN_FLIGHT


def test_a_rejecting_event_wins_over_a_confirming_one_whatever_their_order(store_url: str, tmp_path: Path) -> None:
    """A confirmation and then a rejection arrive while the call is in flight, and its answer is lost: weighed
    together, the rejection decides (a rejected message never went out). Mutant: the first confirmation wins,
    and the caller gets a receipt for a send the provider refused."""
    env = make_env(store_url, tmp_path, dedupe=False, lookups=False)
    adapter = _EventsDuringTheCall(env.fake, env.adapter.contract, lookups_enabled=False)
    adapter.ledger = env.ledger
    adapter.events = (_event(env, "c1", EvidenceVerdict.CONFIRMS), _event(env, "r1", EvidenceVerdict.REJECTS))
    env.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)

    with pytest.raises(EffectRejected, match="as its event events:r1 says"):
        env.ledger.execute(adapter, CHARGE, intent_key=KEY)

    record = env.record()
    assert record.status is EffectStatus.REJECTED
    assert record.resolution is not None
    assert record.resolution.evidence == "events:r1"
    assert len(env.fake.requests()) == 1
    assert env.fake.effects() == []


def test_a_late_answer_naming_a_second_object_is_kept_and_raised_not_taken_for_the_same_answer(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A call outlives its lease; the taker-over's lookup proves absence (the slow request has not landed), so
    it sends again and confirms fx_1; then the slow request lands too, fx_2. Both are "confirmed", but they are
    two effects: the late worker's answer is kept as evidence, the duplicate raised, and its caller told
    ``LeaseLost``. Mutant: ``_answered_alike`` without the id, which hands the late caller a receipt and leaves
    the second charge unseen."""
    env = make_env(store_url, tmp_path, dedupe=False, proves_absence=True)
    taker = env.other_ledger()

    class Slow(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            env.clock.advance(timedelta(minutes=5))  # still on the wire when the lease runs out...
            receipt = taker.execute(env.adapter, CHARGE, intent_key=KEY)  # ...taken over, proven absent, sent
            assert receipt.record.provider_result_id == "fx_1"
            return GenericFakeAdapter.dispatch(self, request, provider_key)  # ...and then it lands: fx_2

    with pytest.raises(LeaseLost), caplog.at_level(logging.ERROR, logger="safe_effects"):
        env.ledger.execute(Slow(env.fake, env.adapter.contract), CHARGE, intent_key=KEY)

    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert [e.result_id for e in env.fake.effects()] == ["fx_1", "fx_2"]
    late = [e for e in env.ledger.store.evidence_for("default", KEY) if e.source == "late_response"]
    assert [(e.verdict, e.provider_result_id) for e in late] == [(EvidenceVerdict.CONFIRMS, "fx_2")]
    assert "names 'fx_2' beside the recorded 'fx_1'" in caplog.text


def test_last_years_late_answer_does_not_settle_this_years_record_of_its_key(store_url: str, tmp_path: Path) -> None:
    """Last year's call outlived its lease and its answer (fx_1) was filed as a late answer, which settled that
    record; it was purged after the retention floor, its evidence kept. This year's send of the same key is lost
    before it reached the provider: it stays unknown. The late answer names the record it answers (its creation
    time), not this one. Mutant: ``_about`` counting any late answer for any record of its key confirms this
    year's send with last year's charge, and the job is told it went out when nothing did."""
    env = make_env(store_url, tmp_path, dedupe=False, lookups=False)
    taker = env.other_ledger()

    class Slow(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            env.clock.advance(timedelta(minutes=5))  # the lease runs out while the request is on the wire
            assert taker.reconcile(env.adapter, intent_key=KEY).status is EffectStatus.UNKNOWN
            return GenericFakeAdapter.dispatch(self, request, provider_key)

    last_year = env.ledger.execute(Slow(env.fake, env.adapter.contract, lookups_enabled=False), CHARGE, intent_key=KEY)
    assert (last_year.record.status, last_year.record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert [e.source for e in env.ledger.store.evidence_for("default", KEY)] == ["late_response"]
    env.clock.advance(timedelta(days=365))
    assert purge_settled(env.ledger.store, older_than=timedelta(days=200), now=env.clock()).deleted == 1

    env.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)
    assert [e.result_id for e in env.fake.effects()] == ["fx_1"]  # last year's only
    assert len(env.fake.requests()) == 2


class _LaggingAndStricter(GenericFakeAdapter):
    """After a deploy: its search has not indexed the first charge yet ("absent", under a contract that trusts
    it), and it refuses the request itself, before any I/O, as the previous release did not."""

    def lookup(self, record: EffectRecord) -> LookupResult:
        return LookupResult(LookupStatus.ABSENT, "search")

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        raise InvalidInput("amount must be a multiple of 100 for this currency")


def test_an_adapters_own_refusal_of_a_later_send_leaves_the_intent_unknown_not_rejected(
    store_url: str, tmp_path: Path
) -> None:
    """The first charge went out and its answer was lost. The retry's lookup says "absent" and the intent is
    sent again, but the adapter refuses that send before any I/O: nothing left the process this time, yet the
    first attempt may have acted (it did), so the intent stays unknown. Mutant: the refusal taken as final on
    any send (``attempt_count == 1`` dropped) rejects it, and a corrected ``:v2`` charges the customer again."""
    env = make_env(store_url, tmp_path, dedupe=False, proves_absence=True)
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    env.clock.advance(env.adapter.contract.normal_response_window)  # the lagging "absent" is then taken as proof

    with pytest.raises(EffectUnknown):
        env.ledger.execute(_LaggingAndStricter(env.fake, env.adapter.contract), CHARGE, intent_key=KEY)

    record = env.record()
    assert (record.status, record.attempt_count, record.last_error_class) == (EffectStatus.UNKNOWN, 2, "InvalidInput")
    assert len(env.fake.requests()) == 1
    assert [e.result_id for e in env.fake.effects()] == ["fx_1"]


class _KeyHeldElsewhere(GenericFakeAdapter):
    """A keyed provider like Stripe: a key that another request holds with other parameters is refused before
    acting, and that refusal says nothing of the other request, which may have acted (unknown, as Stripe's
    ``idempotency_error``). Its search finds only requests with this intent's parameters (Stripe's metadata
    search finds only what the wrapper stamped), so it cannot see the other one."""

    def classify(self, error: BaseException) -> Verdict:
        verdict = GenericFakeAdapter.classify(self, error)
        if verdict.error_code == _HELD_ELSEWHERE:
            return Verdict.of(error, Outcome.UNKNOWN, _HELD_ELSEWHERE)
        return verdict

    def lookup(self, record: EffectRecord) -> LookupResult:
        assert record.provider_key is not None
        ours = request_digest(dict(CHARGE.params))
        for effect in self.fake.effects(record.provider_key):
            if effect.digest == ours:
                return LookupResult(LookupStatus.FOUND, "search", provider_result_id=effect.result_id)
        return LookupResult(LookupStatus.ABSENT, "search")


_HELD_ELSEWHERE = "idempotency_mismatch"


def test_a_lookups_absent_never_reopens_an_intent_whose_key_another_request_holds(
    store_url: str, tmp_path: Path
) -> None:
    """Before adoption, the raw SDK charged under the same key with other parameters; the ledger's send is refused
    as a key held elsewhere (a mismatch code: unknown, never replayed). That other request's key expires on its
    own clock, before the window counted from the ledger's first send closes. The lookup, which cannot see the
    other request, says "absent": the intent stays unknown and is not sent. Mutant: ``may_reopen_when_absent``
    ignoring the mismatch code reopens it inside the window, and once the provider has forgotten the other
    request's key the retry charges the customer a second time."""
    env = make_env(store_url, tmp_path, proves_absence=True)
    keys = env.adapter.contract.idempotency.model_copy(update={"mismatch_codes": frozenset({_HELD_ELSEWHERE})})
    adapter = _KeyHeldElsewhere(env.fake, env.adapter.contract.model_copy(update={"idempotency": keys}))
    env.fake.handle(f"default/{KEY}", {"amount": 2500, "currency": "eur"})  # the raw SDK's charge: fx_1
    env.clock.advance(timedelta(hours=2))
    with pytest.raises(EffectUnknown):
        env.ledger.execute(adapter, CHARGE, intent_key=KEY)  # refused: the key holds the other request
    assert env.record().last_error_code == _HELD_ELSEWHERE
    env.clock.advance(timedelta(hours=22, minutes=30))  # the other key is forgotten; this window still runs

    assert env.ledger.reconcile(adapter, intent_key=KEY).status is EffectStatus.UNKNOWN
    with pytest.raises(EffectUnknown, match="was not resent"):
        env.ledger.execute(adapter, CHARGE, intent_key=KEY)

    assert [outcome for _, outcome in env.fake.requests()] == ["ok", "ok"]  # the raw charge, the refused send
    assert [e.result_id for e in env.fake.effects()] == ["fx_1"]
    record = env.record()
    assert (record.status, record.last_error_code) == (EffectStatus.UNKNOWN, _HELD_ELSEWHERE)
    assert [a.to_status for a in env.ledger.store.audit_trail("default", KEY)] == ["unknown"]
