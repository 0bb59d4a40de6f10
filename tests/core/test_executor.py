"""Every executor branch, against the generic fake, on SQLite and PostgreSQL. Each test checks both sides."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import safe_effects._ledger as ledger_module
from safe_effects import (
    ConcurrentSameKey,
    CrashPlan,
    CrashPoint,
    EarlierVersionInDoubt,
    EffectDeferred,
    EffectInProgress,
    EffectRecord,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    IllegalTransition,
    IntentConflict,
    IntentKey,
    IntentNotFound,
    InvalidInput,
    InvalidIntentKey,
    InvalidTenant,
    LeasePolicy,
    Ledger,
    Resolution,
    RetryPolicy,
    SimulatedCrash,
    UndigestibleRequest,
    UnknownTenant,
    Verdict,
)
from safe_effects._compensation import mark_original_compensated
from safe_effects.testing import FakeClock, FakeFailure, GenericFakeAdapter, GenericFakeProvider, generic_contract

from ._time_limits import Interruption, JobTimeLimit, time_limit

KEY = "invoice:inv_42:collect:v1"
CHARGE = EffectRequest(operation="charge", params={"amount": 2000, "currency": "eur"})
NO_WAIT = RetryPolicy(initial_wait=0.0, max_wait=0.05)  # no back-off; the fake's 10 ms Retry-After is honoured


@dataclass
class Env:
    ledger: Ledger
    fake: GenericFakeProvider
    adapter: GenericFakeAdapter
    clock: FakeClock
    url: str

    def record(self, key: str = KEY):
        return self.ledger.get(key)

    def other_ledger(self, **options: object) -> Ledger:
        """A second worker on the same store, sharing the clock."""
        return _opened(Ledger.open(self.url, clock=self.clock, retry=NO_WAIT, **options))  # type: ignore[arg-type]


_OPEN_LEDGERS: list[Ledger] = []  # every ledger a test here opened, closed after it (see _close_ledgers)


def _opened(ledger: Ledger) -> Ledger:
    _OPEN_LEDGERS.append(ledger)
    return ledger


@pytest.fixture(autouse=True)
def _close_ledgers() -> Iterator[None]:
    """Close what the test opened: a PostgreSQL pool's threads and connections, SQLite's files (which
    Python 3.13 reports as ResourceWarning when they are left to the garbage collector)."""
    yield
    while _OPEN_LEDGERS:
        _OPEN_LEDGERS.pop().close()


def make_env(
    store_url: str,
    tmp_path: Path,
    *,
    dedupe: bool = True,
    lookups: bool = True,
    proves_absence: bool = False,
    crash_plan: CrashPlan | None = None,
) -> Env:
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=dedupe, clock=clock)
    contract = generic_contract(dedupe=dedupe, lookup_proves_absence=proves_absence)
    adapter = GenericFakeAdapter(fake, contract, lookups_enabled=lookups)
    options: dict[str, object] = {"clock": clock, "retry": NO_WAIT}
    if crash_plan is not None:
        options["crash_plan"] = crash_plan
    ledger = _opened(Ledger.open(store_url, **options))  # type: ignore[arg-type]
    return Env(ledger, fake, adapter, clock, store_url)


@pytest.fixture
def env(store_url: str, tmp_path: Path) -> Env:
    return make_env(store_url, tmp_path)


class LookupOnlyAdapter(GenericFakeAdapter):
    """An adapter that says up front it sends nothing (its optional ``refusal`` hook)."""

    def refusal(self, request: EffectRequest) -> str | None:
        return "this adapter only looks effects up"


def test_a_new_intent_the_adapter_cannot_send_is_refused_before_anything_is_recorded(env: Env) -> None:
    """Recorded as rejected, it would hold the key against an adapter that can send it."""
    lookup_only = LookupOnlyAdapter(env.fake, env.adapter.contract)
    for call in (
        lambda: env.ledger.execute(lookup_only, CHARGE, intent_key=KEY),
        lambda: env.ledger.prepare(lookup_only, CHARGE, intent_key=KEY),
    ):
        with pytest.raises(InvalidInput, match="only looks effects up; nothing was recorded"):
            call()
        with pytest.raises(IntentNotFound):
            env.record()
    assert env.fake.effects() == []
    confirmed = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)  # the key is free for one that can send
    again = env.ledger.execute(lookup_only, CHARGE, intent_key=KEY)  # recorded now: answered from the ledger
    assert again.from_ledger
    assert again.record == confirmed.record
    assert len(env.fake.effects()) == 1


def test_happy_path_then_answer_from_ledger(env: Env) -> None:
    first = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    second = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert first.record.status is EffectStatus.CONFIRMED
    assert not first.from_ledger
    assert second.from_ledger
    assert second.provider_result_id == first.provider_result_id == "fx_1"
    assert len(env.fake.effects()) == 1
    assert len(env.fake.requests()) == 1
    # the happy path is told by the record itself; the trail is kept for what the record cannot tell
    stored = env.record()
    assert (stored.version, stored.updated_by, stored.attempt_count) == (2, env.ledger.worker_id, 1)
    assert stored.dispatched_by == env.ledger.worker_id  # kept after the lease ends, unlike lease_owner
    assert stored.resolution is not None
    assert stored.resolution.method == "provider_response"
    assert stored.resolved_at == stored.updated_at
    assert stored.dispatched_at == stored.created_at
    assert (stored.lease_owner, stored.lease_token, stored.lease_expires_at) == (None, None, None)
    assert env.ledger.store.audit_trail("default", KEY) == []


def test_same_key_other_params_is_refused_before_sending(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    before = env.record()
    other = EffectRequest(operation="charge", params={"amount": 9999, "currency": "eur"})

    with (
        caplog.at_level(logging.WARNING, logger="safe_effects"),
        pytest.raises(IntentConflict, match="was recorded for fake charge, confirmed with") as conflict,
    ):
        env.ledger.execute(env.adapter, other, intent_key=KEY)
    assert [r.getMessage() for r in caplog.records] == [str(conflict.value)]  # the worker's log names the key
    assert KEY in caplog.text

    message = str(conflict.value)
    assert "The recorded request reached the provider: if this call is that same action" in message
    assert "do not give it a new key, which would make it twice" in message
    assert "collect:v2" not in message  # a deploys review followed the suggested :v2 after a charge: charged twice
    assert conflict.value.record == before  # a job reads what to do from its status: confirmed, so done
    # worker logs keep the message: no digest (nor a prefix of one) that would confirm a guess of the params
    for digest in (before.request_digest, conflict.value.new_digest):
        assert digest.removeprefix("sha256:")[:8] not in str(conflict.value)
    assert conflict.value.recorded_digest == before.request_digest != conflict.value.new_digest

    assert env.record() == before
    assert len(env.fake.requests()) == 1


def test_a_conflict_names_what_the_record_shows_differs_by_name_never_by_value(env: Env) -> None:
    """A Connect call that changed only its account got the generic "other parameters" message, the account
    never named, though the record's summary had it: the caller had to guess what differed."""

    def charge(account: str, amount: int = 2000) -> EffectRequest:
        return EffectRequest(operation="charge", params={"amount": amount, "on": account}, summary={"on": account})

    env.ledger.execute(env.adapter, charge("acct_A"), intent_key=KEY)
    before = env.record()
    with pytest.raises(
        IntentConflict, match=r"or operation \(of what the record shows, this call differs in: on\)"
    ) as other:
        env.ledger.execute(env.adapter, charge("acct_B"), intent_key=KEY)
    assert "acct_" not in str(other.value)  # a value can be personal (an email address): named, never quoted
    with pytest.raises(IntentConflict) as refund:
        env.ledger.execute(env.adapter, EffectRequest(operation="refund", params={}), intent_key=KEY)
    assert refund.value.differs_in == ("operation", "on")
    with pytest.raises(IntentConflict, match=r"\(nothing the record shows differs: parameters it does not keep do\)"):
        env.ledger.execute(env.adapter, charge("acct_A", amount=1), intent_key=KEY)
    assert env.record() == before
    assert len(env.fake.effects()) == 1


def test_a_conflict_warns_that_a_new_key_may_repeat_an_action_that_went_out(env: Env) -> None:
    """A retry whose request was built anew (a MIME message's fresh boundary) digests differently: following
    the new-key advice for an intent that may have acted would make it twice, so the message says so."""
    other = EffectRequest(operation="charge", params={"amount": 9999, "currency": "eur"})
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    with pytest.raises(IntentConflict, match=r"unknown with .* The recorded request may have reached the provider"):
        env.ledger.execute(env.adapter, other, intent_key=KEY)
    fresh = "invoice:inv_43:collect:v1"
    env.ledger.prepare(env.adapter, CHARGE, intent_key=fresh)
    with pytest.raises(IntentConflict) as conflict:
        env.ledger.prepare(env.adapter, other, intent_key=fresh)
    message = str(conflict.value)  # never sent: a new key is the advice, once the prepared one is withdrawn
    assert "e.g. 'invoice:inv_43:collect:v2', once this one is withdrawn (`safe-effects resolve" in message
    with pytest.raises(EarlierVersionInDoubt):  # which is why: until then the new key is refused
        env.ledger.prepare(env.adapter, other, intent_key="invoice:inv_43:collect:v2")
    assert env.record().status is EffectStatus.UNKNOWN
    assert len(env.fake.effects()) == 1


V2 = "invoice:inv_42:collect:v2"


def test_a_new_version_while_an_earlier_one_may_have_acted_is_refused_before_anything_is_recorded(env: Env) -> None:
    """The forensics review: v1's answer was lost, the app sent v2 (confirmed), a lookup then found v1's charge
    too: a double charge no log or metric showed. v2 now waits until v1 is settled; then it goes as usual."""
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # v1 charged, its answer lost
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    for call in (env.ledger.execute, env.ledger.prepare):
        with pytest.raises(EarlierVersionInDoubt, match=rf"'{V2}' .* new version while '{KEY}' is unknown") as refused:
            call(env.adapter, CHARGE, intent_key=V2)
        assert (refused.value.earlier, refused.value.earlier_status) == (KEY, "unknown")
    with pytest.raises(IntentNotFound):
        env.record(V2)
    assert len(env.fake.effects()) == 1
    assert env.ledger.reconcile(env.adapter, intent_key=KEY).status is EffectStatus.CONFIRMED  # v1 did charge
    assert env.ledger.execute(env.adapter, CHARGE, intent_key=V2).record.status is EffectStatus.CONFIRMED  # as asked
    assert len(env.fake.effects()) == 2


def test_the_database_refuses_a_second_unsettled_version_of_an_action_which_a_read_before_the_insert_misses(
    env: Env,
) -> None:
    """The core audit: two processes starting v1 and v2 at once both passed the read before the insert (v1 not
    recorded yet), and both charged, in 37 of 40 trials on PostgreSQL. The database now refuses the second
    insert. Shown here the way round that read never looks: v1 recorded while v2 is in doubt."""
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # v2 charged, its answer lost
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=V2)
    stored = env.ledger.store.list_by_status(list(EffectStatus))
    for call in (env.ledger.execute, env.ledger.prepare):
        with pytest.raises(
            EarlierVersionInDoubt, match=rf"an earlier version, recorded while '{V2}' is unknown: that one may have"
        ) as refused:
            call(env.adapter, CHARGE, intent_key=KEY)
        assert (refused.value.earlier, refused.value.earlier_status) == (V2, "unknown")
    assert env.ledger.store.list_by_status(list(EffectStatus)) == stored  # nothing written
    assert len(env.fake.effects()) == 1
    assert env.ledger.reconcile(env.adapter, intent_key=V2).status is EffectStatus.CONFIRMED
    assert env.ledger.execute(env.adapter, CHARGE, intent_key=KEY).record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 2  # v1 went once v2 was settled, as a later version would


def test_two_versions_inserted_at_once_are_never_both_recorded_unsettled(env: Env) -> None:
    """The race itself, at the store: v1 claimed between v2's read and v2's insert."""
    v1 = env.ledger.prepare(env.adapter, CHARGE, intent_key=KEY)
    v2 = v1.model_copy(update={"intent_key": IntentKey.parse(V2), "provider_key": f"default:{V2}"})
    with pytest.raises(EarlierVersionInDoubt, match=rf"while '{KEY}' is prepared"):
        env.ledger.store.insert_if_absent(v2)
    assert [r.intent_key for r in env.ledger.store.list_by_status(list(EffectStatus))] == [KEY]
    assert env.fake.effects() == []


def test_a_new_version_while_an_earlier_one_is_prepared_waits_for_its_withdrawal(env: Env) -> None:
    """The QA review: v1 prepared (its send refused), the job moved to v2 as the docs said, and an older worker
    (or a relay) then sent v1 with its old request: two charges. A prepared v1 may still be sent."""
    env.ledger.prepare(env.adapter, CHARGE, intent_key=KEY)
    new_request = EffectRequest(operation="charge", params={"amount": 2100, "currency": "eur"})
    with pytest.raises(EarlierVersionInDoubt, match=rf"'{KEY}' is prepared: that one may still be sent") as refused:
        env.ledger.execute(env.adapter, new_request, intent_key=V2)
    assert "Withdraw" in str(refused.value)
    assert env.fake.effects() == []
    withdrawn = env.ledger.settle(
        env.record(), EffectStatus.REJECTED, resolution=Resolution(method="operator", operator="bob"), actor="bob"
    )
    assert withdrawn.status is EffectStatus.REJECTED
    assert env.ledger.execute(env.adapter, new_request, intent_key=V2).record.status is EffectStatus.CONFIRMED
    with pytest.raises(EffectRejected, match="operator bob"):  # the older worker's send of v1: refused, not sent
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert len(env.fake.effects()) == 1


def test_a_new_version_after_a_rejected_or_never_sent_one_goes_at_once(env: Env) -> None:
    env.fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectRejected):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert env.ledger.execute(env.adapter, CHARGE, intent_key=V2).record.status is EffectStatus.CONFIRMED
    v4 = "invoice:inv_42:collect:v4"  # v3 never recorded: nothing of it to wait for
    assert env.ledger.execute(env.adapter, CHARGE, intent_key=v4).record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 2


def test_lost_response_becomes_unknown_then_same_key_replay_confirms_once(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown), caplog.at_level(logging.INFO, logger="safe_effects"):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert env.record().status is EffectStatus.UNKNOWN
    assert len(env.fake.effects()) == 1
    [unknown] = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "safe_effects"]
    assert unknown == (  # the on-call engineer's line: which intent, and where to look
        "WARNING",
        f"intent {KEY!r} (tenant 'default', fake charge) is unknown after FakeTimeout: not resent; the "
        f"reconciler looks it up, or an operator settles it (safe-effects show {KEY} --tenant default)",
    )
    caplog.clear()

    with caplog.at_level(logging.INFO, logger="safe_effects"):
        receipt = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "key_replay"
    assert receipt.record.attempt_count == 2
    assert len(env.fake.effects()) == 1
    assert len(env.fake.requests()) == 2
    assert [r.getMessage() for r in caplog.records if r.name == "safe_effects"] == [
        f"intent {KEY!r} (tenant 'default', fake) settled confirmed by key_replay, provider id "
        f"{receipt.record.provider_result_id}"
    ]


@dataclass
class InterruptedAfterCommit(GenericFakeAdapter):
    """The provider acts, then the worker's shutdown handler (SIGTERM, Ctrl-C) raises before the answer is read."""

    interrupt: type[BaseException] = SystemExit

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        GenericFakeAdapter.dispatch(self, request, provider_key)
        raise self.interrupt("shutting down")


@pytest.mark.parametrize("interrupt", [SystemExit, KeyboardInterrupt, Interruption])
def test_a_shutdown_mid_request_records_unknown_so_a_restart_reconciles_at_once(
    env: Env, interrupt: type[BaseException]
) -> None:
    """Left in flight, the intent would answer EffectInProgress to a restarted worker until the lease ran out.
    Until 2026-12-01 only SystemExit and KeyboardInterrupt were recorded, not an Interruption (the gevent review)."""
    stopping = InterruptedAfterCommit(env.fake, env.adapter.contract, interrupt=interrupt)
    with pytest.raises(interrupt):
        env.ledger.execute(stopping, CHARGE, intent_key=KEY)
    record = env.record()
    assert (record.status, record.lease_owner, record.last_error_class) == (
        EffectStatus.UNKNOWN,
        None,
        interrupt.__name__,
    )
    assert len(env.fake.effects()) == 1

    receipt = env.other_ledger().execute(env.adapter, CHARGE, intent_key=KEY)  # the restarted worker, at once

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "key_replay"
    assert len(env.fake.effects()) == 1


def test_a_simulated_crash_mid_request_writes_nothing_more_as_a_kill_would(env: Env) -> None:
    """A crash point's exception stands for SIGKILL: unlike a real interruption it is not recorded unknown,
    so a test that raises it sees what a killed worker leaves behind, an intent in flight under its lease."""
    env.fake.crash_plan = CrashPlan.crash_at(CrashPoint.AFTER_PROVIDER_ACCEPT)
    with pytest.raises(SimulatedCrash):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    record = env.record()
    assert (record.status, record.lease_owner) == (EffectStatus.IN_FLIGHT, env.ledger.worker_id)
    assert len(env.fake.effects()) == 1


def test_server_error_after_commit_is_unknown_not_failure(env: Env) -> None:
    env.fake.fail_next(FakeFailure.SERVER_ERROR_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert env.record().last_error_class == "FakeServerError"
    assert env.ledger.execute(env.adapter, CHARGE, intent_key=KEY).provider_result_id == "fx_1"
    assert len(env.fake.effects()) == 1


def test_lost_before_commit_replay_creates_exactly_one(env: Env) -> None:
    env.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert env.fake.effects() == []
    env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert len(env.fake.effects()) == 1


def test_past_retention_window_lookup_settles_without_redispatch(env: Env) -> None:
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    env.clock.advance(timedelta(hours=25))

    receipt = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert receipt.from_ledger
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "lookup:search"
    assert len(env.fake.requests()) == 1
    assert len(env.fake.effects()) == 1


def test_past_retention_window_without_lookup_stays_unknown(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path, lookups=False)
    env.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    env.clock.advance(timedelta(hours=23, minutes=30))  # inside 24 h but past the 1 h safety margin

    with pytest.raises(EffectUnknown, match="was not resent"):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert env.record().status is EffectStatus.UNKNOWN
    assert len(env.fake.requests()) == 1
    assert env.fake.effects() == []


def test_non_deduping_provider_never_resends_an_unknown(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path, dedupe=False, lookups=False)
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    for _ in range(3):
        with pytest.raises(EffectUnknown):
            env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert len(env.fake.requests()) == 1
    assert len(env.fake.effects()) == 1
    assert env.record().status is EffectStatus.UNKNOWN


def _unknown_and_provably_absent(store_url: str, tmp_path: Path, *, dedupe: bool) -> Env:
    """An intent left unknown by a request the provider never acted on, with a lookup that proves absence, once
    the request's normal response window has passed (before it, "absent" may be a request still running)."""
    env = make_env(store_url, tmp_path, dedupe=dedupe, proves_absence=True)
    env.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    env.clock.advance(env.adapter.contract.normal_response_window)
    return env


def test_proven_absence_allows_redispatch_where_contract_says_so(store_url: str, tmp_path: Path) -> None:
    env = _unknown_and_provably_absent(store_url, tmp_path, dedupe=False)

    receipt = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 1
    assert len(env.fake.requests()) == 2
    statuses = [a.to_status for a in env.ledger.store.audit_trail("default", KEY)]
    assert statuses == ["unknown", "prepared", "in_flight"]  # the claim before and the answer after: the record's
    assert receipt.record.version == 5


def test_proven_absence_past_the_retention_window_is_not_redispatched(store_url: str, tmp_path: Path) -> None:
    env = _unknown_and_provably_absent(store_url, tmp_path, dedupe=True)
    env.clock.advance(timedelta(hours=30))  # the provider has forgotten the key: its dedupe no longer helps

    with pytest.raises(EffectUnknown, match="was not resent"):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert env.ledger.reconcile(env.adapter, intent_key=KEY).status is EffectStatus.UNKNOWN

    assert env.record().status is EffectStatus.UNKNOWN
    assert len(env.fake.requests()) == 1
    assert env.fake.effects() == []


def test_proven_absence_inside_the_retention_window_reopens_the_intent(store_url: str, tmp_path: Path) -> None:
    env = _unknown_and_provably_absent(store_url, tmp_path, dedupe=True)

    assert env.ledger.reconcile(env.adapter, intent_key=KEY).status is EffectStatus.PREPARED  # looks up, never sends
    assert len(env.fake.requests()) == 1
    receipt = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(env.fake.requests()) == 2
    assert len(env.fake.effects()) == 1


def test_definitive_refusal_is_rejected_and_stays_rejected(env: Env) -> None:
    env.fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectRejected) as first:
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert first.value.provider_error is not None
    with pytest.raises(EffectRejected):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    record = env.record()
    assert record.status is EffectStatus.REJECTED
    assert record.last_error_code == "declined"
    # the provider's own refusal is the dispatcher's answer: told by the record, no audit row
    assert (record.version, record.updated_by, record.lease_token) == (2, env.ledger.worker_id, None)
    assert record.resolution is not None
    assert record.resolution.method == "provider_response"
    assert env.ledger.store.audit_trail("default", KEY) == []
    assert len(env.fake.requests()) == 1
    assert env.fake.effects() == []


def test_a_lost_answer_is_audited_with_the_claim_before_it_kept_in_the_record(env: Env) -> None:
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    record = env.record()
    [entry] = env.ledger.store.audit_trail("default", KEY)
    assert (entry.from_status, entry.to_status, entry.version, entry.actor) == (
        EffectStatus.IN_FLIGHT,
        EffectStatus.UNKNOWN,
        2,
        env.ledger.worker_id,
    )
    assert (record.status, record.version, record.updated_by) == (EffectStatus.UNKNOWN, 2, env.ledger.worker_id)
    assert record.dispatched_at == record.created_at  # when it was claimed and sent: the record says
    assert len(env.fake.effects()) == 1


def test_rate_limits_are_retried_inside_the_boundary_with_the_same_key(env: Env) -> None:
    env.fake.fail_next(FakeFailure.RATE_LIMITED, FakeFailure.REFUSED)
    receipt = env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    keys = {key for key, _ in env.fake.requests()}
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert [o for _, o in env.fake.requests()] == ["rate_limited", "refused", "ok"]
    assert keys == {f"default/{KEY}"}
    assert len(env.fake.effects()) == 1


def test_retry_waits_honour_retry_after_back_off_and_respect_both_bounds(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path)
    waits: list[float] = []
    policy = RetryPolicy(max_attempts=4, initial_wait=0.25, max_wait=0.75)
    ledger = Ledger(env.ledger.store, clock=env.clock, retry=policy, sleep=waits.append)
    env.fake.fail_next(FakeFailure.REFUSED, FakeFailure.RATE_LIMITED, FakeFailure.REFUSED, FakeFailure.REFUSED)
    with pytest.raises(EffectDeferred):
        ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    # back-off 0.25; the fake's Retry-After hint (0.01 s) wins over back-off; back-off 1.0 capped at
    # max_wait; four attempts, no fifth
    assert waits == [0.25, 0.01, 0.75]
    assert len(env.fake.requests()) == 4
    assert (env.record().status, env.fake.effects()) == (EffectStatus.PREPARED, [])

    out_of_time = Ledger(
        env.ledger.store, clock=env.clock, retry=RetryPolicy(max_total_seconds=0.0), sleep=waits.append
    )
    env.fake.fail_next(FakeFailure.REFUSED)
    with pytest.raises(EffectDeferred):
        out_of_time.execute(env.adapter, CHARGE, intent_key=KEY)
    assert len(env.fake.requests()) == 5  # the time bound allowed no second attempt, and no wait
    assert waits == [0.25, 0.01, 0.75]


class _SkewedHintAdapter(GenericFakeAdapter):
    """A third-party classifier that reads a rate limit's reset time with a clock ahead of the provider's (a
    negative wait) or parses a header into NaN."""

    hint: float = 0.0

    def classify(self, error: BaseException) -> Verdict:
        verdict = super().classify(error)
        return Verdict.of(error, verdict.outcome, verdict.error_code, retry_after=self.hint)


@pytest.mark.parametrize(("hint", "expected_wait"), [(-5.0, 0.0), (float("nan"), 0.25)], ids=["negative", "nan"])
def test_a_retry_after_hint_in_the_past_means_now_and_one_that_is_no_number_means_back_off(
    store_url: str, tmp_path: Path, hint: float, expected_wait: float
) -> None:
    """Passed on as given, either hint reached ``sleep`` (here a recorder), where ``time.sleep`` raises a bare
    ValueError and the call ended untyped, the record left prepared."""
    env = make_env(store_url, tmp_path)
    adapter = _SkewedHintAdapter(env.fake, env.adapter.contract)
    adapter.hint = hint
    waits: list[float] = []
    ledger = Ledger(
        env.ledger.store, clock=env.clock, retry=RetryPolicy(initial_wait=0.25, max_wait=1.0), sleep=waits.append
    )
    env.fake.fail_next(FakeFailure.RATE_LIMITED)

    receipt = ledger.execute(adapter, CHARGE, intent_key=KEY)

    assert waits == [expected_wait]
    assert len(env.fake.requests()) == 2  # the refused attempt and its retry, under the same key
    assert [e.result_id for e in env.fake.effects()] == [receipt.record.provider_result_id]
    assert env.record().status is EffectStatus.CONFIRMED


@pytest.mark.parametrize(
    ("lease_seconds", "expected_waits"),
    [(1.0, [0.4, 0.4]), (0.3, [])],  # a third wait would end at 1.2 s; a first one at 0.4 s, past a 0.3 s lease
    ids=["lapses after two retries", "lapses before the first"],
)
def test_no_retry_starts_after_the_claims_lease_lapses(
    store_url: str, tmp_path: Path, lease_seconds: float, expected_waits: list[float]
) -> None:
    """Past its lease another worker may have taken the intent over (and, where a lookup proves absence,
    sent it): the retries stop inside the lease, whatever the retry policy still allows."""
    env = make_env(store_url, tmp_path)
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # time passes on the ledger's clock while it waits
        waits.append(seconds)
        env.clock.advance(timedelta(seconds=seconds))

    lease = LeasePolicy(duration=timedelta(seconds=lease_seconds))
    policy = RetryPolicy(max_attempts=10, initial_wait=0.4, max_wait=0.4)  # ten attempts, 4 s in all
    ledger = Ledger(env.ledger.store, clock=env.clock, lease=lease, retry=policy, sleep=sleep)
    env.fake.fail_next(*[FakeFailure.REFUSED] * 10)

    with pytest.raises(EffectDeferred, match="lease"):
        ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert waits == expected_waits
    assert len(env.fake.requests()) == len(expected_waits) + 1
    assert (env.record().status, env.fake.effects()) == (EffectStatus.PREPARED, [])


def test_retries_past_the_lease_would_send_twice_where_a_lookup_proves_absence(store_url: str, tmp_path: Path) -> None:
    """The race the lease bound on retries closes: a provider without keys whose lookup proves absence. A
    worker whose retries outlast its lease is taken over by another, which proves the effect absent and sends
    it; a retry of the first worker after that would be a second effect."""
    env = make_env(store_url, tmp_path, dedupe=False, proves_absence=True)
    # a provider that answers within 0.5 s, so a 1 s lease outlasts its calls (a shorter one is refused)
    env.adapter.contract = generic_contract(
        dedupe=False, lookup_proves_absence=True, normal_response_window=timedelta(milliseconds=500)
    )
    other = env.other_ledger()
    lease_ends = env.clock() + timedelta(seconds=1)
    took_over: list[object] = []

    def sleep(seconds: float) -> None:  # while the first worker waits, another arrives once its lease lapsed
        env.clock.advance(timedelta(seconds=seconds))
        if env.clock() >= lease_ends and not took_over:
            took_over.append(other.execute(env.adapter, CHARGE, intent_key=KEY))

    lease = LeasePolicy(duration=timedelta(seconds=1))
    policy = RetryPolicy(max_attempts=10, initial_wait=0.4, max_wait=0.4)
    first = Ledger(env.ledger.store, clock=env.clock, lease=lease, retry=policy, sleep=sleep)
    env.fake.fail_next(*[FakeFailure.REFUSED] * 3)  # the first worker's attempts at 0, 0.4 and 0.8 s

    with pytest.raises(EffectDeferred):
        first.execute(env.adapter, CHARGE, intent_key=KEY)
    assert (env.record().status, took_over) == (EffectStatus.PREPARED, [])  # it stopped inside its lease
    receipt = other.execute(env.adapter, CHARGE, intent_key=KEY)

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 1
    assert [outcome for _, outcome in env.fake.requests()] == ["refused", "refused", "refused", "ok"]


def test_no_retry_starts_whose_normal_answer_would_come_after_the_lease(store_url: str, tmp_path: Path) -> None:
    """Found by a concurrency audit: a retry started 0.2 s before the lease lapsed, the provider answering within
    its 0.5 s window, was still out when another worker found the lease expired, proved the effect absent and
    sent it: two effects. A retry now starts only with the provider's normal response window left on the lease."""
    env = make_env(store_url, tmp_path, dedupe=False, proves_absence=True)
    env.adapter.contract = generic_contract(
        dedupe=False, lookup_proves_absence=True, normal_response_window=timedelta(milliseconds=500)
    )
    other, started = env.other_ledger(), env.clock()
    in_flight: list[object] = []

    class SlowToAnswer:
        """The adapter, whose third request takes 0.45 s to reach the provider: long enough for a takeover."""

        def __getattr__(self, name: str) -> Any:
            return getattr(env.adapter, name)

        def dispatch(self, request: EffectRequest, provider_key: str) -> Any:
            if env.clock() - started >= timedelta(milliseconds=800):
                env.clock.advance(timedelta(milliseconds=450))
                in_flight.append(other.execute(env.adapter, CHARGE, intent_key=KEY))
            return env.adapter.dispatch(request, provider_key)

    lease = LeasePolicy(duration=timedelta(seconds=1))
    policy = RetryPolicy(max_attempts=10, initial_wait=0.4, max_wait=0.4)
    first = Ledger(
        env.ledger.store,
        clock=env.clock,
        lease=lease,
        retry=policy,
        sleep=lambda s: env.clock.advance(timedelta(seconds=s)),
    )
    env.fake.fail_next(FakeFailure.REFUSED, FakeFailure.REFUSED)  # attempts at 0 and 0.4 s; 0.8 s would be next

    with pytest.raises(EffectDeferred, match="lease"):
        first.execute(SlowToAnswer(), CHARGE, intent_key=KEY)  # type: ignore[arg-type]
    assert (env.record().status, in_flight) == (EffectStatus.PREPARED, [])  # no third attempt
    receipt = other.execute(env.adapter, CHARGE, intent_key=KEY)
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 1
    assert [outcome for _, outcome in env.fake.requests()] == ["refused", "refused", "ok"]


@pytest.mark.parametrize("keys", ["none", "run twice when concurrent"])
@pytest.mark.parametrize("lease_seconds", [1, 5])
def test_a_lease_a_normal_answer_can_outlast_is_refused_where_only_the_lease_stops_a_second_send(
    store_url: str, tmp_path: Path, lease_seconds: int, keys: str
) -> None:
    """No keys (or keys the provider runs twice when the same one arrives while the first is in progress), and a
    lookup whose "absent" reopens the intent: a worker still waiting for an answer past its lease is taken over,
    proven absent and sent again. A lease not longer than the provider's normal response window (5 s here) is
    refused before anything is written or sent; where a concurrent same key is refused, the provider stops it."""
    env = make_env(store_url, tmp_path, dedupe=False, proves_absence=True)
    if keys != "none":
        contract = generic_contract(lookup_proves_absence=True)
        duplicating = contract.idempotency.model_copy(update={"concurrent_same_key": ConcurrentSameKey.DUPLICATES})
        env.adapter.contract = contract.model_copy(update={"idempotency": duplicating})
    short = Ledger(env.ledger.store, clock=env.clock, lease=LeasePolicy(duration=timedelta(seconds=lease_seconds)))

    with pytest.raises(InvalidInput, match=rf"lease \({lease_seconds} s\) must outlast fake's normal response window"):
        short.execute(env.adapter, CHARGE, intent_key=KEY)

    assert env.ledger.store.get("default", KEY) is None
    assert env.fake.requests() == []
    deduping = GenericFakeAdapter(env.fake, generic_contract(lookup_proves_absence=True))
    assert short.execute(deduping, CHARGE, intent_key=KEY).record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 1


def test_a_retry_after_longer_than_max_wait_defers_instead_of_retrying_early(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path)
    waits: list[float] = []
    ledger = Ledger(env.ledger.store, clock=env.clock, retry=RetryPolicy(max_wait=0.005), sleep=waits.append)
    env.fake.fail_next(FakeFailure.RATE_LIMITED)  # Retry-After 0.01 s: twice what one call may wait here

    with pytest.raises(EffectDeferred) as deferred:
        ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert deferred.value.retry_after == 0.01
    assert waits == []  # no attempt sooner than the provider asked, and no stall either
    assert len(env.fake.requests()) == 1
    assert (env.record().status, env.fake.effects()) == (EffectStatus.PREPARED, [])


def test_exhausted_retries_defer_and_a_later_call_dispatches(env: Env) -> None:
    env.fake.fail_next(*[FakeFailure.RATE_LIMITED] * 4)
    with pytest.raises(EffectDeferred):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    record = env.record()
    assert (record.status, record.last_error_class) == (EffectStatus.PREPARED, "FakeRateLimited")
    # the trail says why it went back (a deferral), not only the last refusal's class, which the record holds
    [deferral] = env.ledger.store.audit_trail("default", KEY)
    assert (deferral.to_status, deferral.reason) == (EffectStatus.PREPARED, "retryable refusals exhausted")
    assert env.fake.effects() == []

    assert env.ledger.execute(env.adapter, CHARGE, intent_key=KEY).record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 1
    assert len(env.fake.requests()) == 5


@pytest.mark.parametrize(
    ("limit", "first_wait", "refusals", "recorded"),
    [
        (0.2, 5.0, [FakeFailure.REFUSED], "FakeRefused"),  # the limit lands in the first wait
        (0.6, 0.3, [FakeFailure.REFUSED] * 2, "FakeRefused"),  # in a wait between later attempts
        # a 429 asking for 10 ms, then a refused connection: the wait cut short follows the latter
        (0.3, 0.3, [FakeFailure.RATE_LIMITED, FakeFailure.REFUSED], "FakeRefused"),
    ],
    ids=["first wait", "later wait", "after another refusal"],
)
@pytest.mark.parametrize("dedupe", [True, False], ids=["keyed", "no keys"])
def test_a_time_limit_during_the_back_off_puts_the_intent_back_so_the_next_call_sends_it(
    store_url: str,
    tmp_path: Path,
    dedupe: bool,
    limit: float,
    first_wait: float,
    refusals: list[FakeFailure],
    recorded: str,
) -> None:
    """Left in flight, a send only refusals ever answered became unknown at lease expiry: for a provider
    without keys (SendGrid, SES) never resent, an email lost for good."""
    env = make_env(store_url, tmp_path, dedupe=dedupe)
    env.fake.fail_next(*refusals)  # a refused connection has no Retry-After hint: the policy's back-off applies
    slow = Ledger(env.ledger.store, clock=env.clock, retry=RetryPolicy(initial_wait=first_wait, max_wait=10.0))
    with pytest.raises(JobTimeLimit), time_limit(limit):
        slow.execute(env.adapter, CHARGE, intent_key=KEY)  # waits of first_wait, then twice that

    record = env.record()
    assert (record.status, record.lease_owner) == (EffectStatus.PREPARED, None)
    assert (record.last_error_class, record.last_error_code) == (recorded, "interrupted")
    assert [outcome for _, outcome in env.fake.requests()] == [failure.value for failure in refusals]
    assert env.fake.effects() == []

    receipt = env.other_ledger().execute(env.adapter, CHARGE, intent_key=KEY)  # the job's retry, at once

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert [outcome for _, outcome in env.fake.requests()] == [*(failure.value for failure in refusals), "ok"]
    assert len(env.fake.effects()) == 1


def test_a_time_limit_during_a_replays_back_off_leaves_the_intent_unknown(env: Env) -> None:
    """A replay's earlier attempt may have acted: cut short, it goes back to unknown, as when its retries run out."""
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    env.fake.fail_next(FakeFailure.REFUSED)
    slow = Ledger(env.ledger.store, clock=env.clock, retry=RetryPolicy(initial_wait=5.0, max_wait=10.0))
    with pytest.raises(JobTimeLimit), time_limit(0.2):
        slow.execute(env.adapter, CHARGE, intent_key=KEY)  # the same-key replay, refused, then waiting

    record = env.record()
    assert (record.status, record.lease_owner, record.last_error_code) == (EffectStatus.UNKNOWN, None, "interrupted")
    assert len(env.fake.effects()) == 1
    assert env.ledger.execute(env.adapter, CHARGE, intent_key=KEY).record.status is EffectStatus.CONFIRMED
    assert len(env.fake.effects()) == 1


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_a_shutdown_during_the_back_off_puts_the_intent_back_and_raises_on(
    env: Env, interrupt: type[BaseException]
) -> None:
    env.fake.fail_next(FakeFailure.REFUSED)
    slow = Ledger(env.ledger.store, clock=env.clock, retry=RetryPolicy(initial_wait=5.0, max_wait=10.0))

    def stop() -> None:
        raise interrupt("shutting down")

    with pytest.raises(interrupt), time_limit(0.2, first=stop):
        slow.execute(env.adapter, CHARGE, intent_key=KEY)
    assert (env.record().status, env.record().lease_owner) == (EffectStatus.PREPARED, None)
    assert env.fake.effects() == []


def test_a_deferred_replay_stays_unknown_and_never_redispatches_past_the_window(env: Env) -> None:
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT, *[FakeFailure.RATE_LIMITED] * 4)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    with pytest.raises(EffectDeferred, match="unknown again"):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert env.record().status is EffectStatus.UNKNOWN
    env.clock.advance(timedelta(hours=25))
    env.adapter.lookups_enabled = False

    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert len(env.fake.requests()) == 5
    assert len(env.fake.effects()) == 1


def test_classifier_that_raises_records_unknown(env: Env) -> None:
    class BrokenClassifier(GenericFakeAdapter):
        def classify(self, error: BaseException):
            raise RuntimeError("bug in classify")

    broken = BrokenClassifier(env.fake, env.adapter.contract)
    env.fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(broken, CHARGE, intent_key=KEY)
    assert env.record().last_error_code == "classify_failed:RuntimeError"


@dataclass
class _HeldAtDispatch(GenericFakeAdapter):
    """Holds every dispatch until released, so a second caller can be made to wait on a live holder."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        self.entered.set()
        assert self.release.wait(10), "the test never released the holder"
        return super().dispatch(request, provider_key)


class _Waits:
    """An observer that says when its ledger started waiting for another worker."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def on_event(self, event: str, labels: Mapping[str, str]) -> None:
        if event == "claim_contended":
            self.started.set()


@pytest.mark.parametrize(
    ("failures", "waiter_gets", "status", "requests", "effects"),
    [
        ([FakeFailure.LOST_AFTER_COMMIT], EffectUnknown, EffectStatus.UNKNOWN, 1, 1),
        ([FakeFailure.RATE_LIMITED] * 4, EffectDeferred, EffectStatus.PREPARED, 4, 0),
    ],
    ids=["holder_ends_unknown", "holder_is_deferred"],
)
def test_a_caller_that_waited_for_another_never_dispatches(
    env: Env,
    failures: list[FakeFailure],
    waiter_gets: type[Exception],
    status: EffectStatus,
    requests: int,
    effects: int,
) -> None:
    held = _HeldAtDispatch(env.fake, env.adapter.contract)
    env.fake.fail_next(*failures)
    waits = _Waits()
    waiter = env.other_ledger(observer=waits)
    outcomes: dict[str, BaseException] = {}

    def run(name: str, ledger: Ledger) -> None:
        try:
            ledger.execute(held, CHARGE, intent_key=KEY)
        except Exception as error:  # the outcome is what the test compares
            outcomes[name] = error

    holder = threading.Thread(target=run, args=("holder", env.ledger))
    holder.start()
    assert held.entered.wait(10)
    second = threading.Thread(target=run, args=("waiter", waiter))
    second.start()
    assert waits.started.wait(10)  # the waiter found a live holder and waits for it
    held.release.set()
    holder.join(10)
    second.join(10)

    assert type(outcomes.get("holder")) is waiter_gets
    assert type(outcomes.get("waiter")) is waiter_gets  # not a receipt from a dispatch of its own
    assert env.record().status is status
    assert len(env.fake.requests()) == requests  # every request was the holder's
    assert len(env.fake.effects()) == effects


def test_worker_lost_mid_flight_is_reconciled_after_its_lease(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crashing = make_env(store_url, tmp_path, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE))
    with pytest.raises(SimulatedCrash):
        crashing.ledger.execute(crashing.adapter, CHARGE, intent_key=KEY)
    assert crashing.record().status is EffectStatus.IN_FLIGHT
    lost_worker = crashing.record().lease_owner

    survivor = crashing.other_ledger(lease=LeasePolicy(wait_for_other=timedelta(0)))
    with pytest.raises(EffectInProgress), caplog.at_level(logging.INFO, logger="safe_effects"):
        survivor.execute(crashing.adapter, CHARGE, intent_key=KEY)
    crashing.clock.advance(timedelta(minutes=3))
    with caplog.at_level(logging.INFO, logger="safe_effects"):
        receipt = survivor.execute(crashing.adapter, CHARGE, intent_key=KEY)

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(crashing.fake.effects()) == 1
    assert len(crashing.fake.requests()) == 2
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "safe_effects"]
    assert [level for level, _ in logged] == ["INFO", "WARNING", "INFO"]  # waited, took over, settled
    assert logged[0][1].startswith(f"intent {KEY!r} (tenant 'default') is in progress at {lost_worker} until ")
    assert logged[1][1] == (
        f"intent {KEY!r} (tenant 'default', fake charge): the lease of {lost_worker} expired (worker lost "
        "mid-call); now unknown, to be reconciled, not resent blindly"
    )
    assert "settled confirmed by key_replay" in logged[2][1]


def test_crash_during_receipt_persist_rolls_back_the_confirm(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path, crash_plan=CrashPlan.crash_at(CrashPoint.DURING_RECEIPT_PERSIST))
    with pytest.raises(SimulatedCrash):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    assert env.record().status is EffectStatus.IN_FLIGHT
    assert len(env.fake.effects()) == 1


def test_late_finisher_after_takeover_leaves_evidence_that_settles_and_gets_its_receipt(
    store_url: str, tmp_path: Path
) -> None:
    env = make_env(store_url, tmp_path, dedupe=False, lookups=False)
    taker = env.other_ledger()

    class SlowAdapter(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            result = super().dispatch(request, provider_key)
            env.clock.advance(timedelta(minutes=5))  # the call outlives the lease...
            with pytest.raises(EffectUnknown):  # ...so another worker declares it lost
                taker.execute(env.adapter, CHARGE, intent_key=KEY)
            return result

    receipt = env.ledger.execute(SlowAdapter(env.fake, env.adapter.contract), CHARGE, intent_key=KEY)

    record = env.record()
    assert receipt.record == record
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == "fx_1"
    assert record.resolution is not None
    assert record.resolution.method == "evidence:late_response"
    assert len(env.fake.effects()) == 1
    assert len(env.fake.requests()) == 1


def _event(env: Env, event_id: str, verdict: EvidenceVerdict, *, provider: str = "fake") -> Evidence:
    """A provider event about KEY, received now, naming the fake's first object."""
    return Evidence(
        tenant="default",
        intent_key=KEY,
        provider=provider,
        source="events",
        event_id=event_id,
        kind="x",
        verdict=verdict,
        provider_result_id="fx_1",
        received_at=env.clock(),
    )


def test_evidence_settles_an_unknown_and_only_its_own_providers_counts(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path, dedupe=False, lookups=False)
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)

    assert env.ledger.record_evidence(_event(env, "e1", EvidenceVerdict.INFORMATIONAL))
    assert env.record().status is EffectStatus.UNKNOWN
    sendgrids = _event(env, "e0", EvidenceVerdict.REJECTS, provider="sendgrid")
    assert env.ledger.record_evidence(sendgrids)  # kept, not decisive
    assert env.record().status is EffectStatus.UNKNOWN  # another provider's event says nothing about this intent
    assert env.ledger.record_evidence(_event(env, "e2", EvidenceVerdict.CONFIRMS))
    assert not env.ledger.record_evidence(_event(env, "e2", EvidenceVerdict.CONFIRMS))  # duplicate delivery
    record = env.record()
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == "fx_1"
    assert record.resolution is not None
    assert record.resolution.evidence == "events:e2"


@dataclass
class WebhookDuringTheCall(GenericFakeAdapter):
    """The provider's event reaches the ledger (a webhook) while the worker still waits for the answer."""

    ledger: Ledger | None = None
    event: Evidence | None = None

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        try:
            return GenericFakeAdapter.dispatch(self, request, provider_key)
        finally:
            assert self.ledger is not None
            assert self.event is not None
            assert self.ledger.get(KEY).status is EffectStatus.IN_FLIGHT  # decides nothing yet
            assert self.ledger.record_evidence(self.event)


@pytest.mark.parametrize(
    ("verdict", "failure", "effects"),
    [
        (EvidenceVerdict.CONFIRMS, FakeFailure.LOST_AFTER_COMMIT, 1),
        (EvidenceVerdict.REJECTS, FakeFailure.LOST_BEFORE_COMMIT, 0),
    ],
)
def test_an_event_that_came_while_the_call_was_in_flight_settles_it_when_the_answer_is_lost(
    store_url: str, tmp_path: Path, verdict: EvidenceVerdict, failure: FakeFailure, effects: int
) -> None:
    """A helper saw a SendGrid 'delivered' event posted while the send was in flight, then the 202 lost: the
    caller heard EffectUnknown with the proof on file, and only a retry or the reconciler settled it."""
    env = make_env(store_url, tmp_path, dedupe=False, lookups=False)
    adapter = WebhookDuringTheCall(env.fake, env.adapter.contract, lookups_enabled=False)
    adapter.ledger, adapter.event = env.ledger, _event(env, "d1", verdict)
    env.fake.fail_next(failure)
    if verdict is EvidenceVerdict.CONFIRMS:
        receipt = env.ledger.execute(adapter, CHARGE, intent_key=KEY)
        assert (receipt.response, receipt.from_ledger) == (None, False)  # sent; its answer is the event's
        assert receipt.record == env.record()
    else:
        with pytest.raises(EffectRejected, match="rejected by fake, as its event events:d1 says"):
            env.ledger.execute(adapter, CHARGE, intent_key=KEY)
    record = env.record()
    expected = EffectStatus.CONFIRMED if verdict is EvidenceVerdict.CONFIRMS else EffectStatus.REJECTED
    assert (record.status, record.provider_result_id) == (expected, "fx_1")
    assert record.resolution is not None
    assert (record.resolution.method, record.resolution.evidence) == ("evidence:events", "events:d1")
    assert len(env.fake.effects()) == effects


def test_acceptances_of_an_unknown_intent_are_not_read_again_for_every_new_one(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send to many recipients gathers an acceptance each ("processed"); none decides alone, so weighing
    the next event reads only what can: reading them all each time made a webhook POST quadratic."""
    env = make_env(store_url, tmp_path, dedupe=False, lookups=False)
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    rows_read: list[int] = []
    read = env.ledger.store.evidence_for

    def counted(*args: Any, **kwargs: Any) -> list[Evidence]:
        found = read(*args, **kwargs)
        rows_read.append(len(found))
        return found

    monkeypatch.setattr(env.ledger.store, "evidence_for", counted)
    for n in range(40):
        assert env.ledger.record_evidence(_event(env, f"p{n}", EvidenceVerdict.ACCEPTS))
    assert env.record().status is EffectStatus.UNKNOWN  # an acceptance alone waits for a contract's window
    assert sum(rows_read) == 0  # before: 1 + 2 + ... + 40 rows read and parsed
    assert env.ledger.record_evidence(_event(env, "d1", EvidenceVerdict.CONFIRMS))
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert record.resolution is not None
    assert record.resolution.evidence == "events:d1"
    assert len(env.fake.effects()) == 1  # its one send: nothing was sent again


def test_reconcile_uses_lookup_only(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path, dedupe=False)
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    record = env.ledger.reconcile(env.adapter, intent_key=KEY)
    assert record.status is EffectStatus.CONFIRMED
    assert record.resolution is not None
    assert record.resolution.method == "lookup:search"
    assert len(env.fake.requests()) == 1


def test_compensation_is_a_linked_intent(env: Env) -> None:
    env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    refund = EffectRequest(operation="refund", params={"charge": "fx_1"})
    comp_key = "invoice:inv_42:refund:v1"

    receipt = env.ledger.compensate(env.adapter, refund, original_key=KEY, compensating_key=comp_key)
    again = env.ledger.compensate(env.adapter, refund, original_key=KEY, compensating_key=comp_key)

    original = env.record()
    assert original.status is EffectStatus.COMPENSATED
    assert original.compensated_by == comp_key
    assert receipt.record.compensates == KEY
    assert again.from_ledger
    assert len(env.fake.effects()) == 2
    with pytest.raises(IllegalTransition):
        env.ledger.compensate(env.adapter, refund, original_key=KEY, compensating_key="invoice:inv_42:refund:v2")
    assert len(env.fake.effects()) == 2


def _dies_after_the_compensation_commits(ledger: Ledger, record: EffectRecord) -> None:
    """A worker killed between the compensation's confirm and the original's move to compensated."""
    if record.compensates is not None:
        raise SimulatedCrash("killed after the compensation's confirm committed")
    mark_original_compensated(ledger, record)


def test_a_compensation_cut_short_by_a_crash_is_completed_by_running_it_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    refund = EffectRequest(operation="refund", params={"charge": "fx_1"})
    comp_key = "invoice:inv_42:refund:v1"
    dying = Ledger(env.ledger.store, clock=env.clock, retry=NO_WAIT)
    with monkeypatch.context() as patched:
        patched.setattr(ledger_module, "mark_original_compensated", _dies_after_the_compensation_commits)
        with pytest.raises(SimulatedCrash):
            dying.compensate(env.adapter, refund, original_key=KEY, compensating_key=comp_key)
    assert env.record(comp_key).status is EffectStatus.CONFIRMED
    assert env.record().status is EffectStatus.CONFIRMED  # the crash window: compensation done, original not marked

    again = env.ledger.compensate(env.adapter, refund, original_key=KEY, compensating_key=comp_key)

    assert again.from_ledger
    assert env.record().status is EffectStatus.COMPENSATED
    assert env.record().compensated_by == comp_key
    assert len(env.fake.effects()) == 2  # the charge and one refund: nothing was sent again


def test_an_unknown_compensation_marks_the_original_only_once_it_is_confirmed(env: Env) -> None:
    env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    refund = EffectRequest(operation="refund", params={"charge": "fx_1"})
    comp_key = "invoice:inv_42:refund:v1"
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.compensate(env.adapter, refund, original_key=KEY, compensating_key=comp_key)
    assert env.record().status is EffectStatus.CONFIRMED
    assert env.record(comp_key).status is EffectStatus.UNKNOWN

    settled = env.ledger.reconcile(env.adapter, intent_key=comp_key)

    assert settled.status is EffectStatus.CONFIRMED
    assert env.record().status is EffectStatus.COMPENSATED
    assert len(env.fake.effects()) == 2


def test_compensating_an_unknown_effect_is_refused(env: Env) -> None:
    env.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY)
    refund = EffectRequest(operation="refund", params={})
    with pytest.raises(IllegalTransition, match="unknown -> compensated"):
        env.ledger.compensate(env.adapter, refund, original_key=KEY, compensating_key="invoice:inv_42:refund:v1")
    assert len(env.fake.requests()) == 1


def test_prepared_then_executed_dispatches_once(env: Env) -> None:
    prepared = env.ledger.prepare(env.adapter, CHARGE, intent_key=KEY)
    assert prepared.status is EffectStatus.PREPARED
    assert env.fake.requests() == []
    assert env.ledger.execute(env.adapter, CHARGE, intent_key=KEY).record.attempt_count == 1
    assert len(env.fake.effects()) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"intent_key": "invoice::collect:v1"}, InvalidIntentKey, "object_id is empty"),
        ({"intent_key": "attempt-7"}, InvalidIntentKey, "at least 4 parts"),
        ({"intent_key": KEY, "tenant": "x'; DROP TABLE effect_intents;--"}, InvalidTenant, "tenant"),
    ],
)
def test_bad_input_is_typed_and_writes_nothing(
    env: Env, kwargs: dict[str, str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        env.ledger.execute(env.adapter, CHARGE, **kwargs)  # type: ignore[arg-type]
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []
    assert env.fake.requests() == []


def _summary_changed() -> EffectRequest:
    """A request whose summary dict the caller changed after the request checked it."""
    summary = {"who": "alice"}
    request = EffectRequest(operation="charge", params={"amount": 1}, summary=summary)
    summary["who"] = "a\x00b"  # the caller's dict: the request keeps its own copy
    request.summary["who"] = "a\x00b"  # type: ignore[index]  # and its own copy changed too
    return request


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e.ledger.execute(e.adapter, CHARGE, intent_key=KEY, workflow_id=5), "workflow_id must be a str"),
        (lambda e: e.ledger.prepare(e.adapter, CHARGE, intent_key=KEY, step_id=["s"]), "step_id must be a str"),
        # pydantic takes bytes as text: past the NUL check, stored by SQLite, a raw driver error on PostgreSQL
        (
            lambda e: e.ledger.execute(e.adapter, CHARGE, intent_key=KEY, workflow_id=b"a\x00b"),
            "workflow_id must be a str or None, got bytes",
        ),
        (lambda e: e.ledger.execute(e.adapter, _summary_changed(), intent_key=KEY), "summary must map str"),
        (lambda e: EffectRequest(operation=5, params={}), r"EffectRequest\.operation must be"),
        (lambda e: EffectRequest(operation="char\x00ge", params={}), r"EffectRequest\.operation must be .*storable"),
        (lambda e: EffectRequest(operation="charge", params=[1, 2]), r"EffectRequest\.params must be a mapping"),
        (lambda e: EffectRequest(operation="charge", params=None), r"EffectRequest\.params must be a mapping"),
        (
            lambda e: EffectRequest(operation="charge", params={}, summary={"amount": 4200}),
            r"EffectRequest\.summary must map str to storable str",
        ),
        (
            lambda e: EffectRequest(operation="charge", params={}, summary={"who": "\udcff"}),
            r"EffectRequest\.summary must map str to storable str",
        ),
        (
            lambda e: e.ledger.execute(e.adapter, CHARGE, intent_key=KEY, workflow_id="wf\ud800"),
            "workflow_id holds a lone surrogate or NUL",
        ),
        (
            lambda e: e.ledger.execute(e.adapter, CHARGE, intent_key=KEY, step_id="s\x00"),
            "step_id holds a lone surrogate or NUL",
        ),
    ],
    ids=[
        "workflow_id",
        "step_id",
        "workflow_id_bytes",
        "summary_changed_after_the_request_was_made",
        "operation",
        "operation_nul",
        "params_list",
        "params_none",
        "summary_int",
        "summary",
        "surrogate",
        "nul",
    ],
)
def test_wrong_types_are_typed_errors_naming_the_field_and_write_nothing(
    env: Env, call: Callable[[Env], object], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        call(env)
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []
    assert env.fake.requests() == []


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"items": [{"price": 1}, {"price": {1, 2}}]}, r"items\[1\]\.price"),
        ({"items": [{"name": "ok"}, {"name": "caf\udce9"}]}, r"items\[1\]\.name.*lone surrogate"),
    ],
    ids=["set", "surrogate"],
)
def test_undigestible_params_name_the_path(env: Env, params: dict[str, object], path: str) -> None:
    bad = EffectRequest(operation="charge", params=params)
    with pytest.raises(UndigestibleRequest, match=path):
        env.ledger.execute(env.adapter, bad, intent_key=KEY)
    assert env.ledger.store.get("default", KEY) is None
    assert env.fake.requests() == []


def test_tenant_allow_list(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path)
    strict = env.other_ledger(tenants={"acme"})
    with pytest.raises(UnknownTenant, match="globex"):
        strict.execute(env.adapter, CHARGE, intent_key=KEY, tenant="globex")
    # re-cased ids are the mistake the adoption guide warns of: the message says which one was meant
    with pytest.raises(UnknownTenant, match=r"'Acme' .*names 1\); tenant ids are case-sensitive: did you mean 'acme'"):
        strict.execute(env.adapter, CHARGE, intent_key=KEY, tenant="Acme")
    assert env.fake.effects() == []
    strict.execute(env.adapter, CHARGE, intent_key=KEY, tenant="acme")
    assert [e.key for e in env.fake.effects()] == [f"acme/{KEY}"]
    env.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=KEY, tenant="globex")
    globex = env.ledger.get(KEY, tenant="globex")  # read through a ledger that serves globex
    by_hand = Resolution(method="operator", operator="bob", reason="looked")
    with pytest.raises(UnknownTenant, match="globex"):  # settle too keeps to the ledger's tenants
        strict.settle(globex, EffectStatus.REJECTED, resolution=by_hand, actor="operator:bob")
    assert env.ledger.get(KEY, tenant="globex") == globex
    assert len(env.fake.effects()) == 2  # acme's, and globex's that the lost answer hid


@pytest.mark.parametrize(
    ("worker_id", "named"),
    [
        ("w\x00rker", "worker_id holds a lone surrogate or NUL"),
        (7, "worker_id must be a non-blank str"),
        ("", "worker_id must be a non-blank str"),  # was silently replaced by the default id
    ],
)
def test_a_worker_id_no_store_can_hold_is_refused_when_the_ledger_is_made(
    store_url: str, tmp_path: Path, worker_id: object, named: str
) -> None:
    """It becomes every claim's lease owner: PostgreSQL would refuse each claim inside its INSERT instead."""
    env = make_env(store_url, tmp_path)
    with pytest.raises(InvalidInput, match=named):
        env.other_ledger(worker_id=worker_id)
    assert env.ledger.store.get("default", KEY) is None
    assert env.fake.requests() == []


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("retry", None, "retry must be RetryPolicy, got NoneType"),
        ("lease", 5, "lease must be LeasePolicy, got int"),
        ("crash_plan", 5, "crash_plan must be CrashPlan, got int"),
        ("observer", 5, r"observer must be None or an object with on_event\(\), got int"),
        ("tracer", 5, r"tracer must be None or an object with start_as_current_span\(\), got int"),
        ("sleep", 5, "sleep must be a callable, got int"),
        ("clock", 5, "clock must be a callable, got int"),
    ],
)
def test_an_option_of_the_wrong_type_is_refused_when_the_ledger_is_made(
    store_url: str, tmp_path: Path, option: str, value: object, named: str
) -> None:
    """Found at the first call instead, ``retry=None`` raised AttributeError after the provider was asked and left
    the intent in flight; ``observer=5`` after the provider had acted, so the caller saw a failure."""
    env = make_env(store_url, tmp_path)
    with pytest.raises(InvalidInput, match=f"^{named}$"):
        Ledger.open(env.url, **{option: value})  # type: ignore[arg-type]
    assert env.ledger.store.get("default", KEY) is None
    assert env.fake.requests() == []
