"""purge deletes only settled records past the floor; unknown, in-flight and prepared ones always stay."""

from __future__ import annotations

import contextlib
import importlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from safe_effects import (
    EffectOutcome,
    EffectRecord,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    IllegalTransition,
    InvalidInput,
    Ledger,
    LedgerUnavailable,
    ProviderAdapter,
    RetryPolicy,
    Store,
)
from safe_effects._purge import purge_settled
from safe_effects._states import TERMINAL
from safe_effects.testing import FakeClock, FakeFailure

if TYPE_CHECKING:
    from conftest import Ops

S = EffectStatus


@pytest.fixture
def aged(ops: Ops) -> Ops:
    """Records of every status last touched 200 days ago, plus a fresh confirmed one."""
    clock = FakeClock(datetime.now(UTC) - timedelta(days=200))
    old = Ledger(ops.ledger.store, clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    fake = ops.fake

    def run(key: str, failure: FakeFailure | None = None) -> None:
        if failure is not None:
            fake.fail_next(failure)
        with contextlib.suppress(EffectOutcome):  # rejected / unknown outcomes are what we want stored here
            old.execute(ops.adapter, EffectRequest(operation="charge", params={"k": key}), intent_key=key)

    run("old:confirmed:x:v1")
    run("old:rejected:x:v1", FakeFailure.DECLINED)
    run("old:unknown:x:v1", FakeFailure.LOST_AFTER_COMMIT)
    old.prepare(ops.adapter, EffectRequest(operation="charge", params={}), intent_key="old:prepared:x:v1")
    prepared = old.prepare(
        ops.adapter, EffectRequest(operation="charge", params={"f": 1}), intent_key="old:flight:x:v1"
    )
    old.store.transition(prepared, S.IN_FLIGHT, now=clock(), actor="w", changes={"lease_owner": "w"})
    ops.confirmed("new:confirmed:x:v1")
    return ops


def keys(ops: Ops) -> set[str]:
    return {r.intent_key for r in ops.ledger.store.list_by_status(list(S), limit=100)}


ALL = {
    "old:confirmed:x:v1",
    "old:rejected:x:v1",
    "old:unknown:x:v1",
    "old:prepared:x:v1",
    "old:flight:x:v1",
    "new:confirmed:x:v1",
}


def test_purge_below_the_floor_is_refused(aged: Ops) -> None:
    refused = aged.cli("purge", "--older-than", "30")
    assert refused.exit_code == 1
    assert "refusing to purge records younger than 120 days" in refused.stderr
    assert keys(aged) == ALL


@pytest.mark.parametrize(
    ("spans", "named"),
    [
        ({"older_than": timedelta(days=-1), "force_minimum": timedelta(days=-1)}, "older_than"),
        ({"older_than": timedelta(days=150), "force_minimum": timedelta(days=-1)}, "force_minimum"),
        ({"older_than": 150}, "older_than"),
        ({"older_than": timedelta(days=150), "batch": "x"}, "batch"),
        ({"older_than": timedelta(days=150), "batch": True}, "batch"),
    ],
)
def test_purge_refuses_spans_and_batches_it_cannot_mean(aged: Ops, spans: dict[str, Any], named: str) -> None:
    """A negative span put the cut-off in the future: a record confirmed a moment ago was deleted, and for a
    provider without keys its intent key could then send the effect a second time."""
    with pytest.raises(InvalidInput, match=f"^{named} must be"):
        purge_settled(aged.ledger.store, now=datetime.now(UTC), **spans)
    assert keys(aged) == ALL


def test_purge_keeps_unsettled_and_recent_records(aged: Ops) -> None:
    confirmed = aged.ledger.get("old:confirmed:x:v1")
    # an audited change at the same old time (a confirmed record naming itself: the shape a compensation uses)
    aged.ledger.store.transition(confirmed, S.CONFIRMED, now=confirmed.updated_at, actor="operator", reason="noted")
    trail = aged.ledger.store.audit_trail("default", "old:confirmed:x:v1")
    assert [a.reason for a in trail] == ["noted"]
    report = aged.cli_json("purge", "--older-than", "150")
    assert report["deleted"] == 2
    assert report["minimum_days"] == 120
    assert keys(aged) == ALL - {"old:confirmed:x:v1", "old:rejected:x:v1"}
    assert aged.ledger.store.audit_trail("default", "old:confirmed:x:v1") == trail  # it outlives the record


def test_purge_in_batches_of_one_deletes_the_same_records(aged: Ops) -> None:
    assert aged.cli("purge", "--older-than", "150", "--batch", "0").exit_code == 2  # a usage error, nothing done
    assert keys(aged) == ALL
    assert aged.cli_json("purge", "--older-than", "150", "--batch", "1")["deleted"] == 2
    assert keys(aged) == ALL - {"old:confirmed:x:v1", "old:rejected:x:v1"}


def test_forced_minimum_still_never_deletes_unsettled(aged: Ops) -> None:
    report = aged.cli_json("purge", "--older-than", "0", "--force-min-days", "0")
    assert report["deleted"] == 3
    assert keys(aged) == {"old:unknown:x:v1", "old:prepared:x:v1", "old:flight:x:v1"}


def test_a_contract_with_longer_retention_raises_the_floor(aged: Ops) -> None:
    refused = aged.cli("purge", "--older-than", "150", "--adapters", "ops_fake_adapters:long_retention")
    assert refused.exit_code == 1
    assert "younger than 365 days" in refused.stderr
    assert keys(aged) == ALL


@pytest.fixture
def two_floors(ops: Ops, monkeypatch: pytest.MonkeyPatch) -> dict[str, ProviderAdapter[Any]]:
    monkeypatch.setenv("SAFE_EFFECTS_OPS_FAKE", ops.env["SAFE_EFFECTS_OPS_FAKE"])
    adapters: dict[str, ProviderAdapter[Any]] = importlib.import_module("ops_fake_adapters").two_floors()
    return adapters


def settled_at(ops: Ops, when: datetime, adapter: ProviderAdapter[Any], key: str) -> None:
    old = Ledger(ops.ledger.store, clock=FakeClock(when))
    old.execute(adapter, EffectRequest(operation="charge", params={"k": key}), intent_key=key)


def test_a_refusal_found_in_a_later_batch_deletes_nothing(ops: Ops, two_floors: dict[str, Any]) -> None:
    at = datetime.now(UTC) - timedelta(days=200)
    for n in range(4):  # 200 days old under the 120-day floor: purgeable at 130 days
        settled_at(ops, at, two_floors["fake"], f"a:{n}:x:v1")
    settled_at(ops, at + timedelta(seconds=1), two_floors["fake2"], "b:long:x:v1")  # the last batch: 365 days
    before = keys(ops)
    with pytest.raises(InvalidInput, match="younger than 365 days"):
        purge_settled(
            ops.ledger.store, older_than=timedelta(days=130), now=datetime.now(UTC), adapters=two_floors, batch=2
        )
    assert keys(ops) == before  # refused: not one record deleted, not even the earlier batches


def test_cli_refusal_with_adapters_deletes_nothing(ops: Ops, two_floors: dict[str, Any]) -> None:
    at = datetime.now(UTC) - timedelta(days=200)
    settled_at(ops, at, two_floors["fake"], "a:short:x:v1")
    settled_at(ops, at + timedelta(seconds=1), two_floors["fake2"], "b:long:x:v1")
    refused = ops.cli("purge", "--older-than", "130", "--adapters", "ops_fake_adapters:two_floors")
    assert refused.exit_code == 1
    assert "younger than 365 days" in refused.stderr
    assert keys(ops) == {"a:short:x:v1", "b:long:x:v1"}


def test_each_batch_deletes_the_records_it_checked(ops: Ops, two_floors: dict[str, Any]) -> None:
    at = datetime.now(UTC) - timedelta(days=200)  # one instant: only the key orders them
    settled_at(ops, at, two_floors["fake2"], "z:long:x:v1")  # 365-day floor, listed (and checked) second
    settled_at(ops, at, two_floors["fake"], "a:short:x:v1")
    store = ops.ledger.store
    with pytest.raises(InvalidInput, match="younger than 365 days"):
        purge_settled(store, older_than=timedelta(days=130), now=datetime.now(UTC), adapters=two_floors, batch=1)
    assert keys(ops) == {"z:long:x:v1", "a:short:x:v1"}
    # the store deletes exactly the keys it is given, still settled and before the cut-off
    cutoff = datetime.now(UTC) - timedelta(days=100)
    assert store.purge(statuses=TERMINAL, updated_before=cutoff, limit=1, keys=[("default", "z:long:x:v1")]) == 1
    assert keys(ops) == {"a:short:x:v1"}
    recent = datetime.now(UTC) - timedelta(days=300)
    assert store.purge(statuses=TERMINAL, updated_before=recent, limit=1, keys=[("default", "a:short:x:v1")]) == 0
    assert store.purge(statuses=[S.UNKNOWN], updated_before=cutoff, limit=1, keys=[("default", "a:short:x:v1")]) == 0
    assert keys(ops) == {"a:short:x:v1"}


def test_a_record_settled_after_the_check_under_a_longer_floor_stays(
    ops: Ops, two_floors: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the listed records that passed the check are deleted, by key; a late one listed first stays."""
    at = datetime.now(UTC) - timedelta(days=200)
    settled_at(ops, at, two_floors["fake"], "b:short:x:v1")
    store = ops.ledger.store
    real = store.list_by_status
    calls = 0

    def late_arrival(*args: Any, **kwargs: Any) -> list[EffectRecord]:
        nonlocal calls
        calls += 1
        if calls == 2:  # after the floor was checked, before the first batch is listed: same instant, first key
            settled_at(ops, at, two_floors["fake2"], "a:long:x:v1")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "list_by_status", late_arrival)
    report = purge_settled(store, older_than=timedelta(days=130), now=datetime.now(UTC), adapters=two_floors)
    monkeypatch.undo()
    assert report.deleted == 1
    assert keys(ops) == {"a:long:x:v1"}


# --- a key recorded again after its record was purged ---

KEY = "order:o_77:confirm_email:v1"
SENT = EffectRequest(operation="charge", params={"to": "cust_77"})


def ses_event(event_id: str, verdict: EvidenceVerdict, received_at: datetime) -> Evidence:
    """An event about KEY, as the SES event poller records one."""
    fields = {"tenant": "default", "intent_key": KEY, "provider": "fake", "source": "ses_event"}
    return Evidence(**fields, event_id=event_id, kind=verdict.value, verdict=verdict, received_at=received_at)


def purged_after(ops: Ops, verdict: EvidenceVerdict, failure: FakeFailure | None) -> FakeClock:
    """Send SENT under KEY 200 days ago, record an event about it, settle it, and purge it."""
    clock = FakeClock(datetime.now(UTC) - timedelta(days=200))
    old = Ledger(ops.ledger.store, clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    if failure is not None:
        ops.fake.fail_next(failure)
    with contextlib.suppress(EffectOutcome):
        old.execute(ops.adapter, SENT, intent_key=KEY)
    old.record_evidence(ses_event(f"evt-old-{verdict.value}", verdict, clock()))
    assert old.get(KEY).status in TERMINAL
    assert ops.cli_json("purge", "--older-than", "180")["deleted"] == 1
    return clock


def test_a_purged_records_refusal_does_not_decide_the_key_recorded_again(ops: Ops) -> None:
    """200 days ago the send was refused (an event said so) and the record purged. Today the same key is sent
    again, the provider acts and the answer is lost: the old refusal must not settle today's record rejected,
    which would tell the job 'no effect' and invite a second send under a new key."""
    purged_after(ops, EvidenceVerdict.REJECTS, FakeFailure.LOST_BEFORE_COMMIT)
    assert ops.fake.effects() == []
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ops.ledger.execute(ops.adapter, SENT, intent_key=KEY)
    receipt = ops.ledger.execute(ops.adapter, SENT, intent_key=KEY)  # the job's retry
    assert receipt.record.status is S.CONFIRMED
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "key_replay"  # not evidence:ses_event
    assert [e.result_id for e in ops.fake.effects()] == [receipt.provider_result_id]  # today's, once


def test_an_event_about_the_purged_record_that_came_just_before_the_key_was_recorded_again_decides_nothing(
    ops: Ops,
) -> None:
    """A provider retries a webhook for days: a refusal of the purged send may arrive after the purge, minutes
    before the key is recorded again. Received before the new record was created, it is not about it."""
    purged_after(ops, EvidenceVerdict.REJECTS, FakeFailure.LOST_BEFORE_COMMIT)
    retried = ses_event("evt-old-retried", EvidenceVerdict.REJECTS, datetime.now(UTC) - timedelta(minutes=30))
    assert ops.ledger.record_evidence(retried)  # kept; no record of the key exists now
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ops.ledger.execute(ops.adapter, SENT, intent_key=KEY)
    receipt = ops.ledger.execute(ops.adapter, SENT, intent_key=KEY)
    assert receipt.record.status is S.CONFIRMED
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "key_replay"
    assert [e.result_id for e in ops.fake.effects()] == [receipt.provider_result_id]


def test_a_purged_records_confirmation_does_not_stop_rejecting_the_key_recorded_again(ops: Ops) -> None:
    """The old send was delivered (an event said so) and purged; today's send never reached the provider. An
    operator who checked rejects it: the old delivery is not evidence against that."""
    purged_after(ops, EvidenceVerdict.CONFIRMS, None)
    assert len(ops.fake.effects()) == 1
    ops.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        ops.ledger.execute(ops.adapter, SENT, intent_key=KEY)
    version = str(ops.ledger.get(KEY).version)
    resolved = ops.cli(
        "resolve", KEY, "--as", "rejected", "--operator", "carol", "--reason", "not in the feed",
        "--expect-version", version,
    )  # fmt: skip
    assert resolved.exit_code == 0, resolved.output
    assert ops.ledger.get(KEY).status is S.REJECTED
    assert len(ops.fake.effects()) == 1  # only the old one


def test_a_compensation_purged_before_its_original_is_not_sent_again(ops: Ops) -> None:
    """A refund confirmed 200 days ago, its original marked compensated only today (a mark the database lost,
    completed by a rerun): purge takes the refund's record and keeps the original. The same compensate call
    again must not send a second refund under the freed key."""
    clock = FakeClock(datetime.now(UTC) - timedelta(days=200))
    old = Ledger(LosesTheMark(ops.ledger.store), clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    charge, refund = "invoice:inv_9:collect:v1", "invoice:inv_9:refund:v1"
    refund_request = EffectRequest(operation="charge", params={"refund_of": charge})
    old.execute(ops.adapter, EffectRequest(operation="charge", params={"amount": 4200}), intent_key=charge)
    old.compensate(ops.adapter, refund_request, original_key=charge, compensating_key=refund)  # the mark is lost
    assert (ops.ledger.get(refund).status, ops.ledger.get(charge).status) == (S.CONFIRMED, S.CONFIRMED)
    ops.ledger.compensate(ops.adapter, refund_request, original_key=charge, compensating_key=refund)  # completes it
    original = ops.ledger.get(charge)
    assert original.status is S.COMPENSATED
    assert ops.cli_json("purge", "--older-than", "180")["deleted"] == 1
    assert keys(ops) == {charge}

    with pytest.raises(IllegalTransition, match="its record purged since; nothing is sent"):
        ops.ledger.compensate(ops.adapter, refund_request, original_key=charge, compensating_key=refund)

    assert len(ops.fake.effects()) == 2  # the charge and the one refund
    assert keys(ops) == {charge}
    assert ops.ledger.get(charge) == original


def test_an_original_whose_compensation_is_still_in_doubt_is_kept(ops: Ops) -> None:
    """Purged while its refund was unknown, a charge was gone when the refund was found and confirmed: nothing
    was left to mark compensated, and the charge's key was free to charge again."""
    clock = FakeClock(datetime.now(UTC) - timedelta(days=200))
    old = Ledger(ops.ledger.store, clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    charge, refund = "invoice:inv_8:collect:v1", "invoice:inv_8:refund:v1"
    old.execute(ops.adapter, EffectRequest(operation="charge", params={"amount": 4200}), intent_key=charge)
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        old.compensate(ops.adapter, EffectRequest(operation="refund", params={}), original_key=charge,
                       compensating_key=refund)  # fmt: skip
    assert ops.ledger.get(charge).compensated_by == refund

    assert ops.cli_json("purge", "--older-than", "180")["deleted"] == 0
    assert keys(ops) == {charge, refund}
    ops.ledger.reconcile(ops.adapter, intent_key=refund)  # the refund is found at the provider
    assert (ops.ledger.get(refund).status, ops.ledger.get(charge).status) == (S.CONFIRMED, S.COMPENSATED)
    assert len(ops.fake.effects()) == 2  # the charge and its one refund


class LosesTheMark:
    """A store whose first write marking an original compensated is lost with the connection."""

    def __init__(self, store: Store) -> None:
        self.store, self.lost = store, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def transition(self, record: EffectRecord, to: EffectStatus, **changes: Any) -> EffectRecord:
        if to is S.COMPENSATED and not self.lost:
            self.lost = True
            raise LedgerUnavailable("connection lost (simulated)")
        return self.store.transition(record, to, **changes)
