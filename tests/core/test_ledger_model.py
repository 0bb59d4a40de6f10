"""A model-based test of the ledger: random sequences of executes, provider outcomes, crashes, clock moves,
reconciliations, operator decisions and compensations, checked after every step against a model and against
both sides (the fake provider's effects and the ledger's records).

The example-based tests pin each branch of the executor; this one looks for orders of events nobody wrote a
test for. Invariants: never more than one provider effect per intent key; a confirmed record leaves confirmed
only to compensated, and compensated only once its compensation is confirmed; an unknown never causes a
dispatch by itself and nothing is redispatched past the key window; a key reused with other params raises
IntentConflict and changes nothing; every error raised is one of the library's typed errors.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from safe_effects import (
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
    IntentNotFound,
    InvalidInput,
    LeasePolicy,
    Ledger,
    Operator,
    Reconciler,
    RetryPolicy,
    SafeEffectsError,
    SimulatedCrash,
)
from safe_effects.testing import FakeClock, FakeFailure, GenericFakeAdapter, GenericFakeProvider, generic_contract

S = EffectStatus
LEASE = timedelta(seconds=120)
KEY_RETENTION = timedelta(hours=24)  # the fake's and the contract's
REPLAY_WINDOW = KEY_RETENTION - timedelta(hours=1)  # the contract's replay_safety_margin
ATTEMPTS = 3
# the last is a new version of the first: one is refused while the other may have acted or be sent, whichever
# comes first (EarlierVersionInDoubt; migration 6's index, so also the first after the last)
ORIGINALS = ("order:o1:charge:v1", "order:o2:charge:v1", "order:o3:charge:v1", "order:o1:charge:v2")
OTHER_VERSION = {ORIGINALS[3]: ORIGINALS[0], ORIGINALS[0]: ORIGINALS[3]}
COMPENSATIONS = {  # compensating key -> its original
    "refund:o1a:issue:v1": ORIGINALS[0],
    "refund:o1b:issue:v1": ORIGINALS[0],
    "refund:o2a:issue:v1": ORIGINALS[1],
}
ALL_KEYS = (*ORIGINALS, *COMPENSATIONS)
PARAMS = ({"amount": 500, "currency": "eur"}, {"amount": 900, "currency": "eur"})
CLOCK_STEPS = (
    timedelta(seconds=30),
    LEASE + timedelta(seconds=10),  # past a lease
    timedelta(hours=1),
    timedelta(hours=12),
    timedelta(hours=25),  # past the replay window and the provider's key retention
)


StoreFactory = Callable[[Path], tuple[str, Callable[[], None]]]  # a store's URL, and how to drop it after


class Answer(Enum):
    """What the provider does with the next request that reaches it (scripted through ``fail_next``)."""

    ACCEPT = ()
    DECLINE = (FakeFailure.DECLINED,)
    RATE_LIMITED_THEN_ACCEPT = (FakeFailure.RATE_LIMITED,)
    TIMEOUT_AFTER_ACTING = (FakeFailure.LOST_AFTER_COMMIT,)
    TIMEOUT_BEFORE_ACTING = (FakeFailure.LOST_BEFORE_COMMIT,)
    SERVER_ERROR_AFTER_ACTING = (FakeFailure.SERVER_ERROR_AFTER_COMMIT,)
    REFUSED_UNTIL_DEFERRED = (FakeFailure.REFUSED,) * ATTEMPTS


CRASH_AFTER_ACTING = {CrashPoint.AFTER_PROVIDER_ACCEPT, CrashPoint.AFTER_RESPONSE, CrashPoint.DURING_RECEIPT_PERSIST}
SLOW_ANSWERS = {
    Answer.ACCEPT,
    Answer.DECLINE,
    Answer.TIMEOUT_AFTER_ACTING,
    Answer.TIMEOUT_BEFORE_ACTING,
    Answer.SERVER_ERROR_AFTER_ACTING,
}
ACTS = {Answer.ACCEPT, Answer.RATE_LIMITED_THEN_ACCEPT, Answer.TIMEOUT_AFTER_ACTING, Answer.SERVER_ERROR_AFTER_ACTING}


@dataclass(slots=True)
class ScriptedAdapter(GenericFakeAdapter):
    """The generic fake adapter, queuing the scripted failures only when a request really goes out: a failure
    queued for a call that never dispatches would otherwise hit a later, unrelated request."""

    script: list[FakeFailure] = field(default_factory=list)
    # runs once, after the provider answered the next request and before its answer reaches the ledger
    while_answer_travels: Callable[[], None] | None = None

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        if self.script:
            self.fake.fail_next(self.script.pop(0))
        hook, self.while_answer_travels = self.while_answer_travels, None
        try:
            return GenericFakeAdapter.dispatch(self, request, provider_key)
        finally:
            if hook is not None:
                hook()


@dataclass
class KeyModel:
    """What the ledger must say about one intent key, and what the provider did for it."""

    status: EffectStatus | None = None
    params: int | None = None  # index into PARAMS the key was first used with
    first_dispatched_at: datetime | None = None
    dispatched_at: datetime | None = None  # the latest claim's
    lease_expires_at: datetime | None = None
    ever_unknown: bool = False  # the current record was unknown at some point (its trail says so)
    effects: int = 0  # effects the provider committed under this key
    last_effect_at: datetime | None = None
    compensated_by: str | None = None  # for an original: the compensation named on it
    # False once a late answer is on file (a call that outlived its lease): the model stops predicting the
    # key's outcomes (late evidence weighs in) and follows the ledger, whose every step the invariants check
    exact: bool = True
    seen: list[EffectStatus] = field(default_factory=list)  # every status the ledger showed, in order


@dataclass
class Expected:
    """A call's expected outcome: the error type (None: a receipt) and whether it dispatches."""

    error: type[BaseException] | None
    dispatches: bool


def _typed(call: Callable[[], Any]) -> BaseException | None:
    """Run ``call``; the library's typed error (or a simulated crash) it raised, None on success. Any other
    exception is a finding and fails the test as it is."""
    try:
        call()
    except (SafeEffectsError, SimulatedCrash) as error:
        return error
    return None


class LedgerMachine(RuleBasedStateMachine):
    """One ledger on a fake clock in front of one generic fake provider; subclasses pick the contract."""

    dedupe: ClassVar[bool] = True
    proves_absence: ClassVar[bool] = False
    store_url: ClassVar[StoreFactory]

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="se-model-"))
        self.clock = FakeClock()
        self.fake = GenericFakeProvider(self.tmp / "fake.db", dedupe=self.dedupe, clock=self.clock)
        self.contract = generic_contract(dedupe=self.dedupe, lookup_proves_absence=self.proves_absence)
        self.adapter = ScriptedAdapter(self.fake, self.contract)
        url, self.drop_store = type(self).store_url(self.tmp)
        self.options: dict[str, Any] = {
            "clock": self.clock,
            "retry": RetryPolicy(max_attempts=ATTEMPTS, initial_wait=0.0, max_wait=0.05),
            "lease": LeasePolicy(duration=LEASE, wait_for_other=timedelta(0)),
            "sleep": lambda _seconds: None,
        }
        self.ledger = Ledger.open(url, **self.options)
        self.operator = Operator(self.ledger, adapters={"fake": self.adapter})
        self.keys = {key: KeyModel() for key in ALL_KEYS}
        self.events = 0

    def teardown(self) -> None:
        self.ledger.close()
        self.drop_store()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the model ----------------------------------------------------------------------------------------

    def now(self) -> datetime:
        return self.clock()

    def within_replay_window(self, m: KeyModel) -> bool:
        fd = m.first_dispatched_at
        return fd is not None and fd <= self.now() < fd + REPLAY_WINDOW

    def may_reopen(self, m: KeyModel) -> bool:
        """The contract's ``may_reopen_when_absent``."""
        return self.proves_absence and (not self.dedupe or self.within_replay_window(m))

    def may_still_run(self, m: KeyModel, sent: datetime | None = None) -> bool:
        """The latest send (``sent``, else the key's) may still be running: a lookup's "absent" or "refused" proves
        nothing yet (``_response_window.may_still_run``)."""
        sent = sent or m.dispatched_at
        return sent is not None and self.now() < sent + self.contract.normal_response_window

    def absence_proven(self, m: KeyModel, sent: datetime | None = None) -> bool:
        """A lookup's "absent" reopens: where the contract allows, once the latest send can no longer be running."""
        return self.may_reopen(m) and not self.may_still_run(m, sent)

    def worker_lost(self, m: KeyModel) -> None:
        """An in-flight key whose lease ran out: unknown, its latest send moved to the lease's end (a retry the
        record never heard of may have gone out until then)."""
        m.status, m.ever_unknown = S.UNKNOWN, True
        m.dispatched_at, m.lease_expires_at = m.lease_expires_at, None

    def lookup(self, key: str, m: KeyModel) -> None:
        """A lookup's settlement of an unknown key: found -> confirmed; proven absent -> prepared."""
        if m.effects:
            self.settle(key, S.CONFIRMED)
        elif self.absence_proven(m):
            m.status = S.PREPARED

    def settle(self, key: str, to: EffectStatus) -> None:
        self.keys[key].status = to
        if to is S.CONFIRMED and key in COMPENSATIONS:
            self.keys[COMPENSATIONS[key]].status = S.COMPENSATED
            self.keys[COMPENSATIONS[key]].compensated_by = key

    def commit(self, m: KeyModel) -> None:
        """The provider acts on a request for this key (a deduping one only if it forgot the key)."""
        now = self.now()
        if self.dedupe and m.last_effect_at is not None and now < m.last_effect_at + KEY_RETENTION:
            return
        m.effects += 1
        m.last_effect_at = now

    def claim(self, m: KeyModel) -> None:
        m.status = S.IN_FLIGHT
        m.first_dispatched_at = m.first_dispatched_at or self.now()
        m.dispatched_at = self.now()
        m.lease_expires_at = self.now() + LEASE

    def send(
        self, key: str, answer: Answer, *, replay: bool, crash: CrashPoint | None = None
    ) -> type[BaseException] | None:
        """A claim and a dispatch the provider answers with ``answer`` (or a worker killed at ``crash``, its
        claim left in flight); the caller's error type."""
        m = self.keys[key]
        self.claim(m)
        if crash is not None:
            if crash in CRASH_AFTER_ACTING:
                self.commit(m)
            return SimulatedCrash
        m.lease_expires_at = None
        if answer in ACTS:
            self.commit(m)
        if answer in (Answer.ACCEPT, Answer.RATE_LIMITED_THEN_ACCEPT):
            self.settle(key, S.CONFIRMED)
            return None
        if answer is Answer.DECLINE:
            m.status = S.REJECTED
            return EffectRejected
        if answer is Answer.REFUSED_UNTIL_DEFERRED:
            m.status = S.UNKNOWN if replay else S.PREPARED
            return EffectDeferred
        m.status, m.ever_unknown = S.UNKNOWN, True
        return EffectUnknown

    def plan_execute(self, key: str) -> tuple[str, bool]:
        """Without changing the model: how ``execute`` on ``key`` goes — ``send``/``replay``/``answer`` — and
        whether it dispatches. ``answer`` means from the ledger or a lookup, without a request."""
        m = self.keys[key]
        status = m.status
        if self.other_version_in_doubt(key):
            return "refused", False
        sent = m.dispatched_at
        if status is S.IN_FLIGHT:
            assert m.lease_expires_at is not None
            if self.now() < m.lease_expires_at:
                return "answer", False
            status, sent = S.UNKNOWN, m.lease_expires_at
        if status is None:
            return "send", True
        if status is S.PREPARED:
            fresh = m.first_dispatched_at is None or self.may_reopen(m) or not m.ever_unknown
            if fresh:
                return "send", True
            status = S.UNKNOWN
        if status is S.UNKNOWN:
            if self.dedupe and self.within_replay_window(m):
                return "replay", True
            if not m.effects and self.absence_proven(m, sent):
                return "send", True  # proven absent inside the window: reopened and sent at once
        return "answer", False

    def execute_model(self, key: str, answer: Answer, crash: CrashPoint | None = None) -> Expected:
        """Apply ``execute`` on ``key`` to the model: docs/architecture.md, the executor step by step."""
        m = self.keys[key]
        if self.other_version_in_doubt(key):
            return Expected(EarlierVersionInDoubt, False)
        if m.status is S.IN_FLIGHT:
            assert m.lease_expires_at is not None
            if self.now() < m.lease_expires_at:
                return Expected(EffectInProgress, False)
            self.worker_lost(m)
        if m.status is None:
            return Expected(self.send(key, answer, replay=False, crash=crash), True)
        if m.status in (S.CONFIRMED, S.COMPENSATED):
            return Expected(None, False)
        if m.status is S.REJECTED:
            return Expected(EffectRejected, False)
        if m.status is S.PREPARED:
            if m.first_dispatched_at is None or self.may_reopen(m) or not m.ever_unknown:
                return Expected(self.send(key, answer, replay=False, crash=crash), True)
            m.status = S.UNKNOWN  # reopened inside the window, retried after it: reconciled again
        # unknown: evidence (none here), a same-key replay inside the window, else a lookup
        if self.dedupe and self.within_replay_window(m):
            return Expected(self.send(key, answer, replay=True, crash=crash), True)
        self.lookup(key, m)
        if m.status is S.PREPARED:
            return Expected(self.send(key, answer, replay=False, crash=crash), True)
        if m.status is S.CONFIRMED:
            return Expected(None, False)
        return Expected(EffectUnknown, False)

    def other_version_in_doubt(self, key: str) -> bool:
        """A version not recorded yet while another version of its action is unknown, in flight or prepared."""
        other = OTHER_VERSION.get(key)
        in_doubt = {S.UNKNOWN, S.IN_FLIGHT, S.PREPARED}
        return other is not None and self.keys[key].status is None and self.keys[other].status in in_doubt

    def reconcile_model(self, key: str) -> None:
        m = self.keys[key]
        if m.status is S.IN_FLIGHT:
            assert m.lease_expires_at is not None
            if self.now() < m.lease_expires_at:
                return
            self.worker_lost(m)
        if m.status is S.UNKNOWN:
            self.lookup(key, m)

    def realistic(self, key: str, answer: Answer) -> Answer:
        """``answer``, unless it is a definitive decline of a replay the provider already acted on: a real
        deduping provider answers that from its key's stored response, but the fake's scripted failure comes
        before its dedupe. Then an acceptance (the stored response) instead."""
        replays = self.plan_execute(key)[0] == "replay"
        return Answer.ACCEPT if replays and answer is Answer.DECLINE and self.keys[key].effects else answer

    def eligible(self, statuses: set[EffectStatus | None], among: tuple[str, ...] = ALL_KEYS) -> list[str]:
        return [key for key in among if self.keys[key].status in statuses]

    def pick(self, index: int, statuses: set[EffectStatus | None], among: tuple[str, ...] = ALL_KEYS) -> str:
        """The ``index``-th key (wrapping) of those whose model status is in ``statuses`` (a rule's precondition
        makes sure there is one: an ``assume`` in a rule would throw the whole sequence away)."""
        keys = self.eligible(statuses, among)
        return keys[index % len(keys)]

    def refused_compensation(self, comp: str) -> Expected | None:
        """How ``compensate`` answers ``comp`` without executing it, or None when it goes on to execute it
        (docs/architecture.md, step 6: one original, one compensation)."""
        original = self.keys[COMPENSATIONS[comp]]
        holder = original.compensated_by
        if original.status is S.COMPENSATED and holder == comp:
            return Expected(None, False)
        if original.status is not S.CONFIRMED:
            return Expected(IllegalTransition, False)
        if self.keys[comp].status is S.REJECTED:
            return Expected(EffectRejected, False)
        if holder not in (None, comp) and self.keys[holder].status is not S.REJECTED:
            return Expected(IllegalTransition, False)
        return None

    def sendable(self) -> list[str]:
        """Keys whose next execute (or compensate) would send a request."""
        originals = [key for key in ORIGINALS if self.keys[key].exact and self.plan_execute(key)[1]]
        comps = [
            c
            for c in COMPENSATIONS
            if self.keys[c].exact and self.refused_compensation(c) is None and self.plan_execute(c)[1]
        ]
        return originals + comps

    def compensable(self) -> list[str]:
        return [comp for comp, original in COMPENSATIONS.items() if self.keys[original].status is not None]

    # -- running calls against both sides -----------------------------------------------------------------

    def records(self) -> dict[str, EffectRecord | None]:
        found: dict[str, EffectRecord | None] = {}
        for key in ALL_KEYS:
            try:
                found[key] = self.ledger.get(key)
            except IntentNotFound:
                found[key] = None
        return found

    @staticmethod
    def request(key: str, params: int) -> EffectRequest:
        if key in COMPENSATIONS:
            return EffectRequest(operation="refund", params={"refund_of": COMPENSATIONS[key], **PARAMS[0]})
        return EffectRequest(operation="charge", params=PARAMS[params])

    def requests(self) -> int:
        return len(self.fake.requests())

    def follow_ledger(self, key: str) -> None:
        """For a key the model no longer predicts: take the ledger's word (the invariants still check it)."""
        m = self.keys[key]
        record = self.ledger.get(key)
        m.status, m.first_dispatched_at, m.lease_expires_at = record.status, record.first_dispatched_at, None
        m.dispatched_at = record.dispatched_at
        if record.status is S.IN_FLIGHT:
            m.lease_expires_at = record.lease_expires_at
        m.ever_unknown = True
        effects = self.fake.effects(f"default/{key}")
        m.effects, m.last_effect_at = len(effects), effects[-1].at if effects else None
        if key in COMPENSATIONS and record.status is S.CONFIRMED:
            self.settle(key, S.CONFIRMED)

    def check_call(self, key: str, expected: Expected, error: BaseException | None, requests_before: int) -> None:
        if not self.keys[key].exact:
            self.adapter.script.clear()
            self.follow_ledger(key)
            return
        sent = self.requests() - requests_before
        if expected.error is None:
            assert error is None, f"{key}: expected a receipt, got {error!r}"
        else:
            assert isinstance(error, expected.error), f"{key}: expected {expected.error.__name__}, got {error!r}"
        if expected.dispatches:
            assert not self.adapter.script, f"{key}: the provider's scripted answer was never asked for"
        else:
            assert sent == 0, f"{key}: {sent} request(s) sent where none was due"
        self.adapter.script.clear()

    def run_execute(self, key: str, params: int, answer: Answer) -> None:
        m = self.keys[key]
        if m.params is None:
            m.params = params
        before_status, window_open = m.status, self.within_replay_window(m)
        before = self.requests()
        self.adapter.script = list(answer.value)
        request = self.request(key, params)
        expected = self.execute_model(key, answer)
        error = _typed(lambda: self.ledger.execute(self.adapter, request, intent_key=key))
        self.check_call(key, expected, error, before)
        if before_status in (S.UNKNOWN, S.IN_FLIGHT) and not window_open and self.requests() > before:
            # past the key window only a provider without keys whose lookup proved absence may see it again
            assert self.proves_absence, f"{key}: an unknown was resent past its key window"
            assert not self.dedupe, f"{key}: an unknown was resent past its key window"

    # -- rules --------------------------------------------------------------------------------------------

    @rule(key=st.sampled_from(ORIGINALS), params=st.sampled_from([0, 1]), answer=st.sampled_from(Answer))
    def execute(self, key: str, params: int, answer: Answer) -> None:
        m = self.keys[key]
        params = m.params if m.params is not None else params
        self.run_execute(key, params, self.realistic(key, answer))

    @precondition(lambda self: bool(self.eligible(set(S), ORIGINALS)))
    @rule(index=st.integers(0, 15))
    def execute_with_other_params(self, index: int) -> None:
        key = self.pick(index, set(S), ORIGINALS)
        m = self.keys[key]
        assert m.params is not None
        before, requests = self.records(), self.requests()
        other = EffectRequest(operation="charge", params=PARAMS[1 - m.params])
        error = _typed(lambda: self.ledger.execute(self.adapter, other, intent_key=key))
        assert isinstance(error, IntentConflict), f"{key} with other params: {error!r}"
        assert self.records() == before, "a refused IntentConflict changed the ledger"
        assert self.requests() == requests

    @precondition(lambda self: bool(self.sendable()))
    @rule(index=st.integers(0, 15), params=st.sampled_from([0, 1]), point=st.sampled_from(CrashPoint))
    def crash(self, index: int, params: int, point: CrashPoint) -> None:
        """Another worker takes a key it would send and is killed at ``point``: its lease is left to run out."""
        sendable = self.sendable()
        key = sendable[index % len(sendable)]
        m = self.keys[key]
        m.params = m.params if m.params is not None else params
        how = self.plan_execute(key)[0]
        plan = CrashPlan.crash_at(point)
        crashing_fake = GenericFakeProvider(self.fake.path, dedupe=self.dedupe, clock=self.clock, crash_plan=plan)
        adapter = ScriptedAdapter(crashing_fake, self.contract)
        worker = Ledger(self.ledger.store, **{**self.options, "crash_plan": plan})
        before = self.requests()
        request = self.request(key, m.params)
        call: Callable[[], Any] = lambda: worker.execute(adapter, request, intent_key=key)  # noqa: E731
        if key in COMPENSATIONS:
            self.keys[COMPENSATIONS[key]].compensated_by = key
            call = lambda: worker.compensate(  # noqa: E731
                adapter, request, original_key=COMPENSATIONS[key], compensating_key=key
            )
        expected = self.execute_model(key, Answer.ACCEPT, crash=point)
        assert expected.error is SimulatedCrash, how
        error = _typed(call)
        assert isinstance(error, SimulatedCrash), f"{key}: no crash at {point}, got {error!r}"
        assert (self.requests() > before) is (point is not CrashPoint.BEFORE_DISPATCH)

    @rule(key=st.sampled_from(ORIGINALS), params=st.sampled_from([0, 1]))
    def prepare(self, key: str, params: int) -> None:
        """Record the intent as prepared (an outbox): nothing is sent; an existing record is left as it is."""
        m = self.keys[key]
        params = m.params if m.params is not None else params
        before, requests = self.records(), self.requests()
        error = _typed(lambda: self.ledger.prepare(self.adapter, self.request(key, params), intent_key=key))
        if self.other_version_in_doubt(key):
            assert isinstance(error, EarlierVersionInDoubt), repr(error)
            assert self.records() == before, "a refused new version changed the ledger"
            return
        assert error is None, repr(error)
        if m.status is None:
            m.status, m.params = S.PREPARED, params
        else:
            assert self.records() == before, "prepare of a recorded intent changed it"
        assert self.requests() == requests, "prepare sent a request"

    @precondition(lambda self: any(key in ORIGINALS for key in self.sendable()))
    @rule(
        index=st.integers(0, 15),
        params=st.sampled_from([0, 1]),
        late=st.sampled_from(sorted(SLOW_ANSWERS, key=str)),
        taker=st.sampled_from(Answer),
    )
    def call_outlives_its_lease(self, index: int, params: int, late: Answer, taker: Answer) -> None:
        """This worker's call outlives its lease: after the provider answered it, before the answer is written,
        another worker takes the intent over. The late answer must not overwrite what the other decided."""
        sendable = [key for key in self.sendable() if key in ORIGINALS]
        key = sendable[index % len(sendable)]
        m = self.keys[key]
        m.params = m.params if m.params is not None else params
        late = self.realistic(key, late)
        # this worker's claim and what its request did at the provider (the model's "crash" leaves it in flight)
        point = CrashPoint.AFTER_RESPONSE if late in ACTS else CrashPoint.AFTER_DISPATCH
        self.execute_model(key, Answer.ACCEPT, crash=point)
        taker_error: list[BaseException | None] = []

        def take_over() -> None:
            self.clock.advance(LEASE + timedelta(seconds=10))
            answer = self.realistic(key, taker)
            expected = self.execute_model(key, answer)
            before = self.requests()
            self.adapter.script = list(answer.value)
            worker = Ledger(self.ledger.store, **self.options)
            taker_error.append(
                _typed(lambda: worker.execute(self.adapter, self.request(key, m.params or 0), intent_key=key))
            )
            self.check_call(key, expected, taker_error[0], before)

        self.adapter.script = list(late.value)
        self.adapter.while_answer_travels = take_over
        error = _typed(lambda: self.ledger.execute(self.adapter, self.request(key, m.params or 0), intent_key=key))
        self.adapter.while_answer_travels = None
        assert taker_error, "the other worker never took over"
        m.exact = False
        self.follow_ledger(key)
        status = self.ledger.get(key).status
        if error is None:
            assert status in (S.CONFIRMED, S.COMPENSATED), f"{key}: a receipt for a {status} intent"
        if isinstance(error, EffectRejected):
            assert status is S.REJECTED, f"{key}: EffectRejected for a {status} intent"
        assert not isinstance(error, EffectInProgress | SimulatedCrash), repr(error)

    @precondition(lambda self: bool(self.heard_of()))
    @rule(index=st.integers(0, 15))
    def provider_event(self, index: int) -> None:
        """The provider reports an effect it holds (a webhook): an unknown intent, or one whose worker was lost,
        is confirmed at once; a live call's is left to its worker."""
        heard = self.heard_of()
        key = heard[index % len(heard)]
        m = self.keys[key]
        found = self.fake.find(f"default/{key}")
        assert found is not None
        self.events += 1
        event = Evidence(
            tenant="default",
            intent_key=key,
            provider="fake",
            source="fake_webhook",
            event_id=f"evt_{self.events}",
            kind="effect.created",
            verdict=EvidenceVerdict.CONFIRMS,
            provider_result_id=found.result_id,
            received_at=self.now(),
        )
        before = self.requests()
        error = _typed(lambda: self.ledger.record_evidence(event))
        assert error is None, repr(error)
        if m.status is S.IN_FLIGHT and m.lease_expires_at is not None and self.now() < m.lease_expires_at:
            m.exact = False  # decided when the lease runs out, by this evidence rather than a replay or lookup
        elif m.status in (S.UNKNOWN, S.IN_FLIGHT):
            self.settle(key, S.CONFIRMED)
        if not m.exact:
            self.follow_ledger(key)
        assert self.requests() == before, "an event caused a request"

    def heard_of(self) -> list[str]:
        """Keys with an effect at the provider that the ledger may not show as confirmed yet."""
        statuses = {S.UNKNOWN, S.IN_FLIGHT, S.CONFIRMED}
        return [key for key in ALL_KEYS if self.keys[key].effects and self.keys[key].status in statuses]

    @rule(step=st.sampled_from(CLOCK_STEPS))
    def advance_clock(self, step: timedelta) -> None:
        self.clock.advance(step)

    @precondition(lambda self: bool(self.eligible(set(S))))
    @rule(index=st.integers(0, 15))
    def reconcile(self, index: int) -> None:
        # now and then a key never recorded: IntentNotFound
        key = self.pick(index, set(S)) if index % 8 else ALL_KEYS[index % len(ALL_KEYS)]
        before = self.requests()
        error = _typed(lambda: self.ledger.reconcile(self.adapter, intent_key=key))
        if self.keys[key].status is None:
            assert isinstance(error, IntentNotFound), repr(error)
        else:
            assert error is None, repr(error)
            self.reconcile_model(key)
            if not self.keys[key].exact:
                self.follow_ledger(key)
        assert self.requests() == before, "reconcile sent a request"

    @rule()
    def reconciler_sweep(self) -> None:
        before = self.requests()
        report = Reconciler(self.ledger, {"fake": self.adapter}, sleep=lambda _s: None).run_once()
        assert all(item.outcome != "error" for item in report.items), report
        for key in ALL_KEYS:
            self.reconcile_model(key)
            if not self.keys[key].exact and self.keys[key].status is not None:
                self.follow_ledger(key)
        assert self.requests() == before, "the reconciler sent a request"

    @precondition(lambda self: bool(self.eligible({S.UNKNOWN, S.PREPARED})))
    @rule(index=st.integers(0, 15), honest=st.booleans())
    def operator_resolves(self, index: int, honest: bool) -> None:
        """An operator settles an unknown key on evidence (or withdraws a prepared one); a resolution the
        provider contradicts (rejecting an effect it holds) must be refused and change nothing."""
        key = self.pick(index, {S.UNKNOWN, S.PREPARED})
        m = self.keys[key]
        record = self.ledger.get(key)
        to = S.REJECTED if m.status is S.PREPARED or not m.effects else S.CONFIRMED
        honest = honest or to is S.REJECTED  # a lie here is a rejection of an effect the provider holds
        to = to if honest else S.REJECTED
        found = self.fake.find(f"default/{key}")
        before = self.records()
        error = _typed(
            lambda: self.operator.resolve(
                key,
                to=to,
                operator="alice",
                reason="checked at the provider",
                expect_version=record.version,
                provider_result_id=found.result_id if to is S.CONFIRMED and found else None,
                evidence="dashboard" if to is S.CONFIRMED else None,
            )
        )
        # a rejection is refused while the last send may still be running (a prepared key was never sent since)
        if honest and not (to is S.REJECTED and m.status is S.UNKNOWN and self.may_still_run(m)):
            assert error is None, repr(error)
            self.settle(key, to)
            if not m.exact:
                self.follow_ledger(key)
        else:
            assert isinstance(error, InvalidInput), repr(error)
            assert self.records() == before

    @precondition(lambda self: bool(self.compensable()))
    @rule(index=st.integers(0, 15), answer=st.sampled_from(Answer))
    def compensate(self, index: int, answer: Answer) -> None:
        compensable = self.compensable()
        comp = compensable[index % len(compensable)]
        original_key = COMPENSATIONS[comp]
        original, m = self.keys[original_key], self.keys[comp]
        answer = self.realistic(comp, answer)
        record = self.ledger.get(original_key)
        before = self.requests()
        expected = self.refused_compensation(comp)
        if expected is None:
            original.compensated_by, m.params = comp, 0
            expected = self.execute_model(comp, answer)
        self.adapter.script = list(answer.value)
        error = _typed(
            lambda: self.operator.compensate(
                self.adapter,
                original_key=original_key,
                compensating_key=comp,
                operation="refund",
                params=self.request(comp, 0).params,
                operator="bob",
                reason="customer asked",
                expect_version=record.version,
            )
        )
        self.check_call(comp, expected, error, before)

    # -- invariants ---------------------------------------------------------------------------------------

    @invariant()
    def both_sides_agree(self) -> None:
        records = self.records()
        all_effects = self.fake.effects()
        for key, m in self.keys.items():
            record = records[key]
            effects = [effect for effect in all_effects if effect.key == f"default/{key}"]
            assert len(effects) <= 1, f"{key}: {len(effects)} effects at the provider"
            assert len(effects) == m.effects, f"{key}: the provider holds {len(effects)}, the model {m.effects}"
            status = record.status if record else None
            assert status is m.status, f"{key}: the ledger says {status}, the model {m.status}"
            if record is None:
                continue
            if record.status in (S.CONFIRMED, S.COMPENSATED):
                assert effects, f"{key}: {record.status} without an effect at the provider"
                assert record.provider_result_id == effects[0].result_id
            if record.status is S.REJECTED:
                assert not effects, f"{key}: rejected, yet the provider acted"
            if record.status is S.COMPENSATED:
                assert record.compensated_by is not None
                by = records[str(record.compensated_by)]
                assert by is not None, f"{key}: compensated by {record.compensated_by}, which is not recorded"
                assert by.status is S.CONFIRMED, f"{key}: compensated while its compensation is {by.status}"
            if not m.seen or m.seen[-1] is not record.status:
                m.seen.append(record.status)

    @invariant()
    def settled_states_stay_settled(self) -> None:
        for key, m in self.keys.items():
            for earlier, later in zip(m.seen, m.seen[1:], strict=False):
                if earlier is S.CONFIRMED:
                    assert later is S.COMPENSATED, f"{key}: {m.seen}"
                assert earlier not in (S.COMPENSATED, S.REJECTED), f"{key}: {m.seen}"


class DedupingSQLite(LedgerMachine):
    dedupe, proves_absence = True, False


class NonDedupingSQLite(LedgerMachine):
    dedupe, proves_absence = False, False


class DedupingProvenAbsentSQLite(LedgerMachine):
    dedupe, proves_absence = True, True


class NonDedupingProvenAbsentSQLite(LedgerMachine):
    dedupe, proves_absence = False, True


def _sqlite(tmp: Path) -> tuple[str, Callable[[], None]]:
    return f"sqlite:///{tmp / 'ledger.db'}", lambda: None


RUNS = settings(
    max_examples=int(os.environ.get("SE_MODEL_EXAMPLES", "20")),
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize(
    "machine",
    [DedupingSQLite, NonDedupingSQLite, DedupingProvenAbsentSQLite, NonDedupingProvenAbsentSQLite],
    ids=["dedupe", "no-dedupe", "dedupe-proven-absent", "no-dedupe-proven-absent"],
)
def test_ledger_model_sqlite(machine: type[LedgerMachine]) -> None:
    machine.store_url = _sqlite
    run_state_machine_as_test(machine, settings=RUNS)


@pytest.fixture
def pg_schemas(pg_url: str) -> Iterator[StoreFactory]:
    """A schema of its own per example, dropped after it (and any left over by an example that failed, after
    the test)."""
    import psycopg
    from psycopg import sql

    made: list[str] = []

    def drop(*schemas: str) -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    def make(_tmp: Path) -> tuple[str, Callable[[], None]]:
        made.append(schema := f"se_test_{uuid.uuid4().hex[:12]}")
        return f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}", lambda: drop(schema)

    yield make
    drop(*made)


@pytest.mark.postgres
def test_ledger_model_postgres(pg_schemas: StoreFactory) -> None:
    class DedupingPostgres(LedgerMachine):
        dedupe, proves_absence = True, False

    DedupingPostgres.store_url = pg_schemas
    run_state_machine_as_test(DedupingPostgres, settings=settings(RUNS, max_examples=max(1, RUNS.max_examples // 3)))
