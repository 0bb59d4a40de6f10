"""The executor: every external write goes through here, exactly once per intent, or ends as ``unknown``.

:class:`Ledger` claims, sends and records; the rules it applies live beside it: ``_admission`` (what refuses a
call before anything is recorded), ``_reconciliation`` (how an unknown intent is settled), ``_compensation``
(one compensation per original) and ``_evidence_rules`` (which recorded evidence speaks for a record).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from functools import lru_cache
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import Any, Literal, NoReturn, TypedDict, TypeVar, Unpack

from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from ._adapter import (
    EffectRequest,
    LookupResult,
    Outcome,
    ProviderAdapter,
    Verdict,
    check_call,
    checked_summary,
)
from ._admission import answer_margin, refuse_short_lease, refuse_unsendable, refuse_while_earlier_in_doubt
from ._approvals import Approval
from ._clock import Clock, system_clock, system_sleep
from ._clock_skew import DEFAULT_MAX_CLOCK_SKEW, ClockSkewGuard
from ._compensation import check_still_named, claim_compensation, mark_original_compensated
from ._contract import ProviderContract
from ._crash import NO_CRASH, CrashPlan, CrashPoint, SimulatedCrash
from ._digest import check_plain_json, request_digest
from ._errors import (
    EffectDeferred,
    EffectInProgress,
    EffectRejected,
    EffectUnknown,
    IllegalTransition,
    IntentConflict,
    IntentNotFound,
    InvalidInput,
    InvalidIntentKey,
    LeaseLost,
    LedgerClosed,
    LedgerUnavailable,
    MigrationsPending,
    StaleRecord,
    UnknownTenant,
)
from ._evidence_rules import (
    CLOCK_SKEW,
    LATE_RESPONSE,
    acted_evidence,
    answers_latest,
    check_evidence_names,
    own_evidence,
    shows_an_unrecorded_effect,
)
from ._fork import renew_in_children
from ._keys import IntentKey
from ._observer import NullObserver, Observer
from ._policies import DEFAULT_LEASE, DEFAULT_RETRY, LeasePolicy, RetryPolicy
from ._reconciliation import (
    decide_by_evidence,
    reconcile_before_resend,
    reconcile_for_caller,
    settle_by_evidence,
    settle_by_lookup,
    settled_while_in_flight,
    unknown_again,
)
from ._records import EffectRecord, Evidence, EvidenceVerdict, Receipt, Resolution
from ._running_calls import RunningCalls, counted
from ._sending import BackoffCut, Retryable, Settled, send_with_retries
from ._settle_checks import check_settlement, refuse_contradicted
from ._states import TERMINAL, EffectStatus, resolvable, settled_status
from ._store import Store
from ._tenants import DEFAULT_TENANT, check_tenant
from ._text import check_storable, holds_unstorable_text
from ._tracing import Tracer, traced
from ._unsent import UnsentClaims

R = TypeVar("R")
S = EffectStatus


_log = logging.getLogger("safe_effects")

# what every write that ends a lease sets: no owner, no expiry, no claim token
_NO_LEASE: Mapping[str, None] = MappingProxyType({"lease_owner": None, "lease_expires_at": None, "lease_token": None})
# how often new evidence is weighed again when the record moved on meanwhile; each loss is another writer's
# progress (a reopen, a settle), so a few rounds end it
_EVIDENCE_ROUNDS = 5
# whether a record's request went out, for a conflict's message (a prepared or rejected one did not act)
_REACHED_PROVIDER = {
    S.IN_FLIGHT: "may have reached",
    S.UNKNOWN: "may have reached",
    S.CONFIRMED: "reached",
    S.COMPENSATED: "reached",
}


def _answered_alike(current: EffectRecord, to: EffectStatus, result_id: str | None) -> bool:
    """The intent is settled as a late worker's own answer said: the same state and provider id."""
    return to is not S.UNKNOWN and current.status is to and current.provider_result_id == result_id


@lru_cache(maxsize=32)
def _resolution_by(method: str) -> Resolution:
    """One frozen Resolution per method for the executor's own outcomes (made on every confirm)."""
    return Resolution(method=method)


def _max_clock_skew(given: object, clock: Clock) -> timedelta | None:
    """``Ledger(max_clock_skew=...)`` checked and resolved: ``"auto"`` checks the system clock only."""
    if given == "auto":
        return DEFAULT_MAX_CLOCK_SKEW if clock is system_clock else None
    if given is None or (isinstance(given, timedelta) and given > timedelta(0)):
        return given
    raise InvalidInput(f"max_clock_skew must be a positive timedelta, None or 'auto', got {given!r}")


def _default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LedgerOptions(TypedDict, total=False):
    """The keyword options of :class:`Ledger`, for :meth:`Ledger.open` (see the constructor for each)."""

    clock: Clock
    worker_id: str | None
    lease: LeasePolicy
    retry: RetryPolicy
    tenants: Collection[str] | None
    crash_plan: CrashPlan
    observer: Observer | None
    sleep: Callable[[float], None]
    max_clock_skew: timedelta | Literal["auto"] | None
    tracer: Tracer | None


def _check_options(**given: Any) -> None:
    """Refuse a wrongly typed option when the ledger is made: found at the first call instead, a ``retry=None``
    failed after the provider was asked and left the intent in flight, an ``observer`` after it had acted."""
    expected: dict[str, tuple[type, ...] | str] = {
        "lease": (LeasePolicy,),
        "retry": (RetryPolicy,),
        "crash_plan": (CrashPlan,),
        "clock": "callable",
        "sleep": "callable",
        "observer": "on_event",
        "tracer": "start_as_current_span",
    }
    for name, value in given.items():
        kind = expected[name]
        if isinstance(kind, tuple):
            fits, wanted = isinstance(value, kind), kind[0].__name__
        elif kind == "callable":
            fits, wanted = callable(value), "a callable"
        else:  # a protocol: None or an object with that method
            fits, wanted = value is None or callable(getattr(value, kind, None)), f"None or an object with {kind}()"
        if not fits:
            raise InvalidInput(f"{name} must be {wanted}, got {type(value).__name__}")


def _cut_short(error: BaseException) -> bool:
    """Whether ``error`` interrupted a call in a process that lives on: not an Exception, and not a
    SimulatedCrash (which stands for a kill). A shutdown's SystemExit or KeyboardInterrupt, gevent's Timeout
    (a gevent worker's time limit), a killed greenlet, Dramatiq's time limit: what the call was doing is
    written down before it goes on, as far as one write can."""
    return not isinstance(error, Exception | SimulatedCrash)


def _maybe_written(error: BaseException) -> bool:
    """Whether a claim's write that failed with ``error`` may have committed all the same, in a process that
    goes on: the database did not acknowledge it, or the call was cut short while waiting for it."""
    return isinstance(error, LedgerUnavailable) or _cut_short(error)


class Ledger:
    """Runs effects through a :class:`Store` so each intent reaches the provider at most once, knowingly."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock = system_clock,
        worker_id: str | None = None,
        lease: LeasePolicy = DEFAULT_LEASE,
        retry: RetryPolicy = DEFAULT_RETRY,
        tenants: Collection[str] | None = None,
        crash_plan: CrashPlan = NO_CRASH,
        observer: Observer | None = None,
        sleep: Callable[[float], None] = system_sleep,
        max_clock_skew: timedelta | Literal["auto"] | None = "auto",
        tracer: Tracer | None = None,
    ) -> None:
        """On a store that lacks migrations this release needs: :class:`MigrationsPending` (``Ledger.open``,
        ``store.migrate()`` and ``safe-effects migrate`` apply them).

        ``max_clock_skew``: how far this worker's clock may be from the database server's before every call that
        writes is refused (:class:`ClockSkewed`); ``"auto"`` is 30 s with the system clock and no check with an
        injected ``clock`` (a test's time travel); None turns it off. SQLite has no clock of its own to compare.

        ``tracer``: an OpenTelemetry tracer (``trace.get_tracer("safe_effects")``); each ``execute``,
        ``compensate`` and reconciliation then runs in a span of its own (see ``_tracing``). None: no spans.
        """
        _check_options(
            clock=clock, lease=lease, retry=retry, crash_plan=crash_plan, observer=observer, sleep=sleep, tracer=tracer
        )
        self.store = store
        self.clock = clock
        self._clock_guard = ClockSkewGuard(store, clock, _max_clock_skew(max_clock_skew, clock))
        given: object = worker_id  # as passed at run time, whatever the annotation promises
        if given is not None and (not isinstance(given, str) or not given.strip()):
            raise InvalidInput(f"worker_id must be a non-blank str (or None for the default), got {worker_id!r}")
        # it is every claim's lease owner: a NUL in it would fail each claim inside PostgreSQL's INSERT
        self.worker_id = check_storable(worker_id, "worker_id") if worker_id else _default_worker_id()
        self._worker_id_given = worker_id is not None
        renew_in_children(self)
        self.lease = lease
        self.retry = retry
        if isinstance(tenants, str):  # iterated, "acme" would be the tenants a, c, m and e
            raise InvalidInput(f"tenants must be a collection of tenant ids, not the str {tenants!r}")
        self.tenants = frozenset(check_tenant(t) for t in tenants) if tenants is not None else None
        self.crash_plan = crash_plan
        self.observer: Observer = observer or NullObserver()
        self.tracer = tracer
        self._sleep = sleep
        # (tenant, key, version) of in-flight records whose outcome this ledger could not write: their lease
        # is dead (nobody here is working on them), so a later call takes them over at once
        self._abandoned: set[tuple[str, str, int]] = set()
        self._unsent = UnsentClaims(keep_for=lease.duration)  # claims whose write failed here, never sent
        self._calls = RunningCalls()  # close() lets them write what their provider answered
        # once, here: a store built by hand and not migrated would fail call after call on a column or table
        # it lacks, as a raw driver error (Ledger.open migrates first)
        if pending := store.pending_migrations():
            raise MigrationsPending(pending)
        self._clock_guard.measure()

    @classmethod
    def open(cls, url: str = "sqlite:///safe-effects.sqlite3", **options: Unpack[LedgerOptions]) -> Ledger:
        """Open (and migrate) the store at ``url`` — ``sqlite:///file`` or ``postgresql://...``; ``options`` are
        the constructor's (a misspelt one is a type error; at run time a ``TypeError``, the store closed again)."""
        from ._store_url import open_store  # noqa: PLC0415 - keeps psycopg out of import time

        store = open_store(url)
        try:
            store.migrate()
            return cls(store, **options)
        except BaseException:  # a refused option (worker_id, tenants) must not leave a pool or files open
            store.close()
            raise

    def close(self, *, wait: float | None = None) -> None:
        """Refuse new calls (:class:`LedgerClosed`), let the ones running in other threads write what their
        provider answered, then close the store. ``wait`` bounds that, in seconds (default: the lease, which
        bounds a call's sending); a call still running after it ends as :class:`EffectUnknown`, its intent
        in flight until the lease runs out, as if its worker had been killed."""
        limit = self.lease.duration.total_seconds() if wait is None else wait
        if still_running := self._calls.close(limit):
            sending = sorted(f"{key!r} (tenant {tenant!r})" for tenant, key in filter(None, still_running))
            _log.warning(
                "ledger closed with %d call(s) still running after %g s: what their provider answered will not "
                "be recorded; their intents stay in flight until the lease runs out, then are reconciled. "
                "Intents sent or being sent: %s",
                len(still_running),
                limit,
                ", ".join(sending) if sending else "none (they were waiting or reading)",
            )
        self.store.close()

    def _renew_after_fork(self) -> None:
        """A forked child is another worker: a default id names the process, and the parent's would hold
        leases the child does not."""
        if not self._worker_id_given:
            self.worker_id = _default_worker_id()
        self._calls = self._calls.renewed()

    def __reduce__(self) -> NoReturn:
        """Refused by name: pickle's own error names a thread-local deep inside the store."""
        raise TypeError(
            "a Ledger cannot be pickled or copied: it holds open database connections. Open the "
            "ledger in the process that uses it: Ledger.open(url) in a spawned process's target, a pool's "
            "initializer or Celery's worker_process_init, not in the parent"
        )

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public API ---------------------------------------------------------------------------------------

    @counted
    @traced("safe_effects.execute", attrgetter("record"))
    def execute(
        self,
        adapter: ProviderAdapter[R],
        request: EffectRequest,
        *,
        intent_key: IntentKey | str,
        tenant: str = DEFAULT_TENANT,
        workflow_id: str | None = None,
        step_id: str | None = None,
        compensates: IntentKey | None = None,
    ) -> Receipt[R]:
        """Perform ``request`` once for ``intent_key``: a receipt, or a typed outcome error, never a guess."""
        self._clock_guard.check()
        tag = self._unsent.tag()
        fresh = self._new_record(
            adapter,
            request,
            intent_key=intent_key,
            tenant=tenant,
            status=S.IN_FLIGHT,
            workflow_id=workflow_id,
            step_id=step_id,
            compensates=compensates,
            lease_token=tag,
        )
        contract = adapter.contract_for(request.operation)
        refuse_short_lease(self.lease, contract, self._clock_guard.max_skew)
        refuse_unsendable(self.store, adapter, request, fresh)
        if fresh.compensates is not None:
            claim_compensation(self, fresh, adapter)  # refused here: nothing written or sent (one per original)
        else:
            refuse_while_earlier_in_doubt(self.store, fresh)
        try:
            record, created = self.store.insert_if_absent(fresh)
        except BaseException as failed:
            if _maybe_written(failed):  # never sent
                self._unsent.failed(fresh, tag, fresh.created_at)
            raise
        if fresh.compensates is not None:
            try:
                check_still_named(self, record, fresh, created=created)
            except LedgerUnavailable:
                if created:  # written, never sent, maybe not put back: like a claim whose answer was lost
                    self._unsent.failed(record, tag, fresh.created_at)
                raise
        if created:
            return self._dispatch(adapter, request, record, contract)
        return self._resume(adapter, request, record, fresh, contract)

    @counted
    def prepare(
        self,
        adapter: ProviderAdapter[Any],
        request: EffectRequest,
        *,
        intent_key: IntentKey | str,
        tenant: str = DEFAULT_TENANT,
        workflow_id: str | None = None,
        step_id: str | None = None,
        connection: Any = None,
    ) -> EffectRecord:
        """Record the intent as ``prepared``; with ``connection``, inside the caller's own open transaction on the
        ledger's own database (psycopg 3 or sqlite3), committed or rolled back with it. Nothing sends a prepared
        intent but a later :meth:`execute` of the same request, after that commit."""
        self._clock_guard.check()
        fresh = self._new_record(
            adapter,
            request,
            intent_key=intent_key,
            tenant=tenant,
            status=S.PREPARED,
            workflow_id=workflow_id,
            step_id=step_id,
        )
        refuse_unsendable(self.store, adapter, request, fresh)
        refuse_while_earlier_in_doubt(self.store, fresh)
        record, created = self.store.insert_if_absent(fresh, connection=connection)
        if not created:
            self._check_digest(record, fresh)
        return record

    @counted
    def get(self, intent_key: IntentKey | str, *, tenant: str = DEFAULT_TENANT) -> EffectRecord:
        key, tenant = IntentKey.parse(intent_key), self._tenant(tenant)
        record = self.store.get(tenant, key)
        if record is None:
            raise IntentNotFound(f"no effect recorded for intent {key!r} (tenant {tenant!r})")
        return record

    def reconcile(
        self, adapter: ProviderAdapter[Any], *, intent_key: IntentKey | str, tenant: str = DEFAULT_TENANT
    ) -> EffectRecord:
        """Settle an unknown (or abandoned in-flight) intent from evidence or a lookup; never redispatches."""
        # counted as a running call in _reconcile, which the reconciler calls too
        return self._reconcile(adapter, intent_key=intent_key, tenant=tenant)[0]

    @counted
    @traced("safe_effects.reconcile", itemgetter(0))
    def _reconcile(
        self,
        adapter: ProviderAdapter[Any],
        *,
        intent_key: IntentKey | str,
        tenant: str,
        before_lookup: Callable[[], None] | None = None,
    ) -> tuple[EffectRecord, LookupResult | None]:
        """:meth:`reconcile`, and the lookup it made (None without one): the reconciler counts a failed lookup
        as an error, where a lookup that found nothing yet is not one. ``before_lookup`` runs only when a lookup
        is about to: the reconciler's pacing, which evidence already on file does not wait for."""
        check_call(adapter)
        self._clock_guard.check()
        record = self.get(intent_key, tenant=tenant)
        if adapter.provider != record.provider:
            raise InvalidInput(
                f"intent {record.intent_key!r} was sent to {record.provider!r}: a {adapter.provider!r} adapter "
                "cannot look it up"
            )
        record = self._expire_lease(record)
        if record.status is not S.UNKNOWN:
            return record, None
        contract = adapter.contract_for(record.operation)
        if (settled := settle_by_evidence(self, record, contract)) is not None:
            return settled, None
        if before_lookup is not None:
            before_lookup()
        settled, found = settle_by_lookup(self, adapter, record)
        return settled or self.get(intent_key, tenant=tenant), found

    @counted
    @traced("safe_effects.compensate", attrgetter("record"))
    def compensate(
        self,
        adapter: ProviderAdapter[R],
        request: EffectRequest,
        *,
        original_key: IntentKey | str,
        compensating_key: IntentKey | str,
        tenant: str = DEFAULT_TENANT,
    ) -> Receipt[R]:
        """Run a separate, linked compensating intent; the original turns ``compensated`` once it is confirmed."""
        original = self.get(original_key, tenant=tenant)
        comp_key = IntentKey.parse(compensating_key)
        if original.status is S.COMPENSATED and original.compensated_by == comp_key:
            return self.execute(adapter, request, intent_key=comp_key, tenant=tenant, compensates=original.intent_key)
        if original.status is S.COMPENSATED:
            why = f"it is already compensated by {original.compensated_by!r}; one original gets one compensation"
            raise IllegalTransition(original.status.value, S.COMPENSATED.value, original.intent_key, why=why)
        if original.status is not S.CONFIRMED:
            why = "only a confirmed effect can be compensated"
            raise IllegalTransition(original.status.value, S.COMPENSATED.value, original.intent_key, why=why)
        return self.execute(
            adapter,
            request,
            intent_key=comp_key,
            tenant=tenant,
            workflow_id=original.workflow_id,
            compensates=original.intent_key,
        )

    # -- settlement and evidence --------------------------------------------------------------------------

    @counted
    def settle(
        self,
        record: EffectRecord,
        to: EffectStatus,
        *,
        resolution: Resolution,
        actor: str,
        provider_result_id: str | None = None,
        response_digest: str | None = None,
        detail: Mapping[str, Any] | None = None,
        approval: Approval | None = None,
    ) -> EffectRecord:
        """Move an unknown record to confirmed or rejected, conditional on the state the caller saw; withdraw a
        prepared one (never sent) as rejected; or correct a rejected one to confirmed, when its own provider's
        evidence on record says it acted.

        ``detail`` lands in the audit row (operator, approver) next to the reason, after what was decided: the
        resolution's method and evidence reference and the provider's id, so the trail says it on its own (the
        record's resolution is overwritten by a later change, and the record itself purged).
        ``approval`` is the pending approval this applies, as decided (:meth:`Approval.decided`): it is
        written in the same transaction, or neither is (StaleRecord when it was decided meanwhile).

        A settlement the provider's own events on file contradict is refused (:class:`InvalidInput`): a
        rejection after an event says the provider took the request, say, which a retry under a new key
        would turn into a second effect.
        """
        check_settlement(
            record, resolution, actor, provider_result_id, response_digest, detail=detail, approval=approval
        )
        self._tenant(record.tenant)  # before its evidence is read: a record of another tenant is no way in
        to = settled_status(to)
        self._refuse_contradicted(record, to, provider_result_id)  # evidence may have arrived since it was asked
        return self._settle(
            record,
            to,
            resolution=resolution,
            actor=actor,
            provider_result_id=provider_result_id,
            response_digest=response_digest,
            detail=detail,
            approval=approval,
        )

    def _refuse_contradicted(self, record: EffectRecord, to: EffectStatus, provider_result_id: str | None) -> None:
        """See :func:`refuse_contradicted`: the record's own events about its latest attempt are what count (an
        event stamped by a clock behind the record's creator too: this refuses, it never decides)."""
        own = [e for e in own_evidence(self.store, record, allowance=CLOCK_SKEW) if answers_latest(e, record)]
        refuse_contradicted(record, to, provider_result_id, own)

    def _settle(
        self,
        record: EffectRecord,
        to: EffectStatus,
        *,
        resolution: Resolution,
        actor: str,
        provider_result_id: str | None = None,
        response_digest: str | None = None,
        detail: Mapping[str, Any] | None = None,
        approval: Approval | None = None,
    ) -> EffectRecord:
        """:meth:`settle` as the ledger's own settlements by evidence and lookup run it: they weigh the events
        themselves."""
        self._tenant(record.tenant)  # a record read elsewhere is no way past this ledger's tenants
        self._clock_guard.check()
        if not resolvable(record.status, to):
            why = "only an unknown intent is settled (a prepared one withdrawn as rejected, a rejected one corrected)"
            raise IllegalTransition(record.status, to, record.intent_key, why=why)
        if record.status is S.REJECTED and not acted_evidence(self.store, record):
            why = "a rejected intent is corrected only on its provider's own evidence that it acted: none on record"
            raise IllegalTransition(record.status, to, record.intent_key, why=why)
        check_storable(actor, "actor")
        for text, what in ((provider_result_id, "provider_result_id"), (response_digest, "response_digest")):
            if text is not None:
                check_storable(text, what)
        check_plain_json(resolution.model_dump(exclude_none=True), "the resolution")
        if detail is not None:
            check_plain_json(detail, "the audit detail")
        decided = {
            "method": resolution.method,
            "evidence": resolution.evidence,
            "provider_result_id": provider_result_id,
        }
        detail = {**{name: value for name, value in decided.items() if value is not None}, **(detail or {})}
        now = self.clock()
        changes: dict[str, Any] = {"resolved_at": now, "resolution": resolution, **_NO_LEASE}
        if provider_result_id is not None:
            changes["provider_result_id"] = provider_result_id
        if response_digest is not None:
            changes["response_digest"] = response_digest
        settled = self.store.transition(
            record,
            to,
            now=now,
            actor=actor,
            reason=resolution.reason or resolution.method,
            changes=changes,
            detail=detail,
            approval=approval,
        )
        self._observe("reconciliation", settled, method=resolution.method, outcome=to.value)
        _log.info(
            "intent %r (tenant %r, %s) settled %s by %s, provider id %s",
            settled.intent_key, settled.tenant, settled.provider, to, resolution.method, settled.provider_result_id,
        )  # fmt: skip
        self._raise_unrecorded_effects(settled)
        mark_original_compensated(self, settled)
        return settled

    @counted
    def record_evidence(self, evidence: Evidence) -> bool:
        """Store provider evidence once; if it decides an unknown intent, settle it now. False if a duplicate."""
        if not isinstance(evidence, Evidence):
            raise InvalidInput(f"evidence must be a safe_effects.Evidence, got {type(evidence).__name__}")
        self._tenant(evidence.tenant)
        IntentKey.parse(evidence.intent_key)
        check_evidence_names(evidence)
        check_plain_json(evidence.detail, f"the detail of evidence {evidence.event_id!r}")
        if holds_unstorable_text(evidence.model_dump(mode="json")):
            raise InvalidInput(f"evidence {evidence.event_id!r} holds a lone surrogate or NUL, which no store holds")
        self._clock_guard.check()  # its received_at is this worker's clock, which rejection windows compare
        if not self.store.add_evidence(evidence):
            return False
        record = self.store.get(evidence.tenant, evidence.intent_key)
        settled_before = record is not None and record.status in TERMINAL  # else settling it weighs this too
        for _ in range(_EVIDENCE_ROUNDS):
            if record is None:
                break
            try:
                record = decide_by_evidence(self, record)
                break
            except StaleRecord:  # moved on meanwhile (a reopen, a settle): decide again on what it is now
                record = self.store.get(evidence.tenant, evidence.intent_key)
        if settled_before and record is not None and evidence.provider == record.provider:  # others' say nothing
            if record.status is S.CONFIRMED and evidence.verdict is EvidenceVerdict.REJECTS:
                self._contradicted(record, evidence)
            elif shows_an_unrecorded_effect(record, evidence):
                self._unrecorded_effect(record, evidence)
        return True

    def _contradicted(self, record: EffectRecord, evidence: Evidence) -> None:
        """The provider took the call (confirmed), then said the message never went out (a drop, a rendering
        failure). The record stays confirmed: sending again would meet the same refusal, and the provider did
        act on the call. The evidence is kept on the record (``safe-effects show``); this makes it seen."""
        _log.warning(
            "intent %r (tenant %r) is confirmed, but %s evidence %r says the provider did not carry it out (%s): "
            "not resent; see safe-effects show %s --tenant %s",
            record.intent_key, record.tenant, evidence.source, evidence.event_id, evidence.kind,
            record.intent_key, record.tenant,
        )  # fmt: skip
        self._observe("contradicting_evidence", record, source=evidence.source, kind=evidence.kind)

    def _raise_unrecorded_effects(self, settled: EffectRecord) -> None:
        """Evidence already on record that the intent's settled state does not show: a late answer of one
        attempt filed while another was still in flight, which then settled otherwise."""
        for evidence in own_evidence(self.store, settled):
            if shows_an_unrecorded_effect(settled, evidence):
                self._unrecorded_effect(settled, evidence)

    def _unrecorded_effect(self, record: EffectRecord, evidence: Evidence) -> None:
        """The provider acted where the record says it did not (rejected), or a late answer names a second
        object beside the confirmed one (a possible duplicate). Nothing here can undo it: it must be seen."""
        what = (
            "the provider acted on it"
            if record.status is S.REJECTED
            else f"it names {evidence.provider_result_id!r} beside the recorded {record.provider_result_id!r}"
        )
        _log.error(
            "intent %r (tenant %r) is %s, but %s evidence %r says %s: check at the provider "
            "(safe-effects show %s --tenant %s)",
            record.intent_key, record.tenant, record.status, evidence.source, evidence.event_id, what,
            record.intent_key, record.tenant,
        )  # fmt: skip
        self._observe("unrecorded_effect", record, source=evidence.source, status=record.status.value)

    # -- claim and resume ---------------------------------------------------------------------------------

    def _new_record(
        self,
        adapter: ProviderAdapter[Any],
        request: EffectRequest,
        *,
        intent_key: IntentKey | str,
        tenant: str,
        status: EffectStatus,
        workflow_id: str | None,
        step_id: str | None,
        compensates: IntentKey | str | None = None,
        lease_token: str | None = None,
    ) -> EffectRecord:
        """Validate everything about the call before the store is touched."""
        check_call(adapter, request)
        tenant = self._tenant(tenant)
        key = IntentKey.parse(intent_key)
        if compensates is not None:
            try:
                compensates = IntentKey.parse(compensates)
            except InvalidIntentKey as bad:
                raise InvalidIntentKey(f"intent {key!r}: compensates: {bad}") from bad
            if compensates == key:
                raise InvalidInput(f"intent {key!r} cannot compensate itself")
        for name, text in (("workflow_id", workflow_id), ("step_id", step_id)):
            if text is None:
                continue
            if not isinstance(text, str):  # pydantic would take bytes as text, past the check below
                raise InvalidInput(f"intent {key!r}: {name} must be a str or None, got {type(text).__name__}")
            check_storable(text, f"intent {key!r}: {name}")
        digest = request_digest(
            {"provider": adapter.provider, "operation": request.operation, "params": dict(request.params)}
        )
        now = self.clock()
        claimed = status is S.IN_FLIGHT
        try:
            return EffectRecord(
                tenant=tenant,
                intent_key=key,
                provider=adapter.provider,
                operation=request.operation,
                request_digest=digest,
                status=status,
                workflow_id=workflow_id,
                step_id=step_id,
                provider_key=adapter.provider_key(tenant, key),
                attempt_count=1 if claimed else 0,
                lease_owner=self.worker_id if claimed else None,
                lease_expires_at=now + self.lease.duration if claimed else None,
                lease_token=lease_token if claimed else None,
                summary=checked_summary(request.summary),
                created_at=now,
                updated_at=now,
                updated_by=self.worker_id,
                first_dispatched_at=now if claimed else None,
                dispatched_at=now if claimed else None,
                dispatched_by=self.worker_id if claimed else None,
                compensates=compensates,
            )
        except ValidationError as error:  # a wrong type from the caller (workflow_id=5): named, typed
            fields = ", ".join(".".join(str(part) for part in e["loc"]) for e in error.errors())
            raise InvalidInput(f"intent {key!r}: invalid {fields}: {error}") from error

    def _resume(
        self,
        adapter: ProviderAdapter[R],
        request: EffectRequest,
        record: EffectRecord,
        fresh: EffectRecord,
        contract: ProviderContract,
    ) -> Receipt[R]:
        """Answer a call (``fresh``, as it would be recorded) whose intent is already recorded, without ever
        dispatching twice."""
        self._check_digest(record, fresh)
        self._unsent.prune(record, self.worker_id)
        deadline = time.monotonic() + self.lease.wait_for_other.total_seconds()
        contended = False  # observed once per call
        waited_for_holder = False  # a live worker held the intent while this call waited
        while True:
            try:
                if record.status in (S.CONFIRMED, S.COMPENSATED):
                    # a crash may have cut a compensation short of marking its original
                    mark_original_compensated(self, record)
                    return Receipt(record=record, from_ledger=True)
                if record.status is S.REJECTED:
                    raise self._rejected(record, None)
                if waited_for_holder and record.status in (S.PREPARED, S.UNKNOWN):
                    raise self._holder_outcome(record)  # a caller that waited for another never dispatches
                if record.status is S.PREPARED and (reason := reconcile_before_resend(self, record, contract)):
                    record = unknown_again(self, record, reason)
                if record.status is S.PREPARED:
                    return self._dispatch(adapter, request, self._claim(record, request), contract)
                if record.status is S.UNKNOWN:
                    return reconcile_for_caller(self, adapter, request, record, contract)
                if self._unsent.takes(record, self.worker_id):
                    unsent, record = record, self._unclaim(record, "claim written unacknowledged, never sent")
                    self._unsent.forget(unsent)  # only now: a failed unclaim leaves it for the next call
                    waited_for_holder = False  # nobody held it: this call sends it
                    continue
                if record.lease_expired(self.clock()) or self._abandoned_here(record):
                    record = self._expire_lease(record)
                    waited_for_holder = False  # the holder is lost, not finished: this call reconciles
                    continue
            except StaleRecord:
                pass  # another worker moved it: read again and decide again
            waited_for_holder = True
            if not contended:
                contended = True
                self._observe("claim_contended", record)
            if time.monotonic() >= deadline or self._calls.closing:
                why = ": this ledger is closing" if self._calls.closing else f" within {self.lease.wait_for_other}"
                _log.info(
                    "intent %r (tenant %r) is in progress at %s until %s: this call did not send it",
                    record.intent_key, record.tenant, record.lease_owner, record.lease_expires_at,
                )  # fmt: skip
                raise EffectInProgress(
                    f"intent {record.intent_key!r} is held by {record.lease_owner} until "
                    f"{record.lease_expires_at}; it did not finish{why}",
                    intent_key=record.intent_key,
                    record=record,
                )
            self._sleep(self.lease.poll_interval)
            record = self.get(record.intent_key, tenant=record.tenant)

    @staticmethod
    def _holder_outcome(record: EffectRecord) -> EffectDeferred | EffectUnknown:
        """What a caller that waited gets when the worker it waited for ended without a confirmed answer."""
        if record.status is S.PREPARED:
            return EffectDeferred(
                f"intent {record.intent_key!r}: the worker that held it was refused by {record.provider} "
                f"({record.last_error_class}); the intent is prepared again, try again later",
                intent_key=record.intent_key,
                record=record,
            )
        return EffectUnknown(
            f"intent {record.intent_key!r}: the worker that held it ended without an answer from "
            f"{record.provider}; it is recorded unknown and will be reconciled, not resent by this caller",
            intent_key=record.intent_key,
            record=record,
        )

    def _claim(self, record: EffectRecord, request: EffectRequest, *, reason: str = "claim") -> EffectRecord:
        """Take ``record`` to send ``request`` (its digest checked equal). The summary becomes this request's: a
        client setting the digest leaves out (SES's default configuration set, which its events are checked
        against) may have changed since the record was made, by a deploy, and this send goes out with it. The
        summary it replaces goes into the claim's audit row (a compensation's operator and reason, say)."""
        now, tag = self.clock(), self._unsent.tag()
        changes = {
            "summary": request.summary,
            "lease_owner": self.worker_id,
            "lease_expires_at": now + self.lease.duration,
            "lease_token": tag,
            "attempt_count": record.attempt_count + 1,
            "first_dispatched_at": record.first_dispatched_at or now,
            "dispatched_at": now,
            "dispatched_by": self.worker_id,
        }
        replaced = None if request.summary == record.summary else {"summary_before": dict(record.summary)}
        try:
            return self._move(record, S.IN_FLIGHT, f"{reason} #{tag}", changes, now=now, detail=replaced)
        except BaseException as failed:
            never_sent = record.first_dispatched_at is None  # a later call may take this claim over
            if never_sent and _maybe_written(failed):
                self._unsent.failed(record.model_copy(update={"version": record.version + 1}), tag, now)
            raise

    def _expire_lease(self, record: EffectRecord) -> EffectRecord:
        """An in-flight record whose lease ran out lost its worker: its outcome is unknown. So is one whose
        outcome this very ledger could not write (its lease is dead before it runs out)."""
        abandoned = self._abandoned_here(record)
        if record.status is not S.IN_FLIGHT:
            return record
        if not abandoned:
            self._clock_guard.check()  # the lease is judged by this clock: a fast one takes live calls over
            if not record.lease_expired(self.clock()):
                return record
        expired = self._move(
            record,
            S.UNKNOWN,
            "its outcome could not be written: ledger unavailable"
            if abandoned
            else f"lease of {record.lease_owner} expired: worker lost",
            {**_NO_LEASE, "last_error_class": "LeaseExpired", **self._latest_send(record)},
        )
        self._abandoned.discard((record.tenant, record.intent_key, record.version))
        if not abandoned:  # an abandoned one was logged when its answer could not be written
            _log.warning(
                "intent %r (tenant %r, %s %s): the lease of %s expired (worker lost mid-call); now unknown, to be "
                "reconciled, not resent blindly",
                record.intent_key, record.tenant, record.provider, record.operation, record.lease_owner,
            )  # fmt: skip
        return expired

    def _latest_send(self, record: EffectRecord) -> dict[str, datetime]:
        """For an in-flight record whose worker is gone (or could not write its outcome): its ``dispatched_at``
        moved to the latest its last attempt may have started, since a retry that worker wrote nothing of may
        have gone out until its lease ran out (or, abandoned here, until now). A lookup waits out the provider's
        normal response window from then before it takes "absent" or "refused" for an answer."""
        if record.dispatched_at is None or record.lease_expires_at is None:
            return {}
        latest = min(record.lease_expires_at, self.clock())
        return {"dispatched_at": latest} if latest > record.dispatched_at else {}

    def _unclaim(self, record: EffectRecord, reason: str) -> EffectRecord:
        """A claim under which nothing was sent, back to ``prepared``: claimed and sent as usual later."""
        return self._move(
            record,
            S.PREPARED,
            reason,
            {
                **_NO_LEASE,
                "attempt_count": record.attempt_count - 1,
                "first_dispatched_at": None,
                "dispatched_at": None,
                "dispatched_by": None,
            },
        )

    def _move(
        self,
        record: EffectRecord,
        to: EffectStatus,
        reason: str,
        changes: Mapping[str, Any] | None = None,
        *,
        now: datetime | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> EffectRecord:
        """One transition written by this worker, now (or at ``now``, when ``changes`` were computed from it)."""
        return self.store.transition(
            record, to, now=now or self.clock(), actor=self.worker_id, reason=reason, changes=changes, detail=detail
        )

    def _abandoned_here(self, record: EffectRecord) -> bool:
        return (
            record.status is S.IN_FLIGHT
            and record.lease_owner == self.worker_id
            and (record.tenant, record.intent_key, record.version) in self._abandoned
        )

    # -- dispatch -----------------------------------------------------------------------------------------

    def _dispatch(
        self,
        adapter: ProviderAdapter[R],
        request: EffectRequest,
        record: EffectRecord,
        contract: ProviderContract,
        *,
        method: str = "provider_response",
    ) -> Receipt[R]:
        assert record.provider_key is not None
        self._calls.sending(record.tenant, record.intent_key)
        self.crash_plan.hit(CrashPoint.BEFORE_DISPATCH)
        retried: list[datetime] = []  # when each retry of this call went out: the latest is the record's last send

        def last_retry() -> datetime | None:
            return retried[-1] if retried else None

        try:
            # an adapter's own refusal proves nothing was sent only if nothing of this intent was sent before
            first = method == "provider_response" and record.attempt_count == 1
            response = send_with_retries(
                adapter,
                request,
                record.provider_key,
                first=first,
                policy=self.retry,
                sleep=self._sleep,
                lease_left=lambda: self._lease_left(record, contract),  # read only when a retry is weighed
                before_retry=lambda: retried.append(self.clock()),
            )
        except Retryable as exhausted:
            # a deferred replay goes back to unknown: an earlier attempt may have acted
            back_to = S.UNKNOWN if method == "key_replay" else S.PREPARED
            self._finish(record, back_to, exhausted.verdict, released=True)
            hint = exhausted.verdict.retry_after
            when = "later" if hint is None else f"in {hint:g} s (the adapter's hint: a Retry-After or a back-off)"
            raise EffectDeferred(
                f"intent {record.intent_key!r}: {exhausted.verdict.error_class}, and neither the retry policy (at "
                f"most {self.retry.max_attempts} attempts within {self.retry.max_total_seconds:g} s, "
                f"{self.retry.max_wait:g} s apart) nor the claim's lease (until {record.lease_expires_at}) allows "
                f"a further attempt in this call; the intent is {back_to} again, try again {when}",
                intent_key=record.intent_key,
                retry_after=exhausted.verdict.retry_after,
                provider_error=exhausted.error,
            ) from exhausted.error
        except Settled as settled:
            verdict = settled.verdict
            sent_at = last_retry()
            if verdict.outcome is Outcome.FINAL:
                rejected = self._finish(record, S.REJECTED, verdict, method=method, sent_at=sent_at)
                raise self._rejected(rejected, settled.error) from settled.error
            unknown = self._finish(record, S.UNKNOWN, verdict, sent_at=sent_at)
            if (decided := settled_while_in_flight(self, unknown, contract)) is not None:
                if decided.status is S.REJECTED:
                    raise self._rejected(decided, None) from settled.error
                return Receipt(record=decided)  # sent, its answer lost: an event told what it did
            raise EffectUnknown(
                f"intent {record.intent_key!r}: {verdict.error_class} after the request may have reached "
                f"{record.provider}; it is recorded unknown and will be reconciled, not resent blindly",
                intent_key=record.intent_key,
                record=unknown,
            ) from settled.error
        except BackoffCut as cut:  # a job's time limit or a shutdown while a retry waited: nothing was sent
            # back to where the refusals left it, and the interruption raised on, for the job runner to see
            back_to = S.UNKNOWN if method == "key_replay" else S.PREPARED
            why = f"back-off interrupted: {type(cut.interruption).__qualname__}"
            written = self._last_write(record, back_to, why, cut.verdict.error_class)
            if not written and back_to is S.PREPARED and record.attempt_count == 1:
                # left in flight, and every attempt of this intent so far was refused: this ledger's next call (a
                # job's retry, in this process) takes the claim back and sends, as for a claim whose write went
                # unacknowledged. Sent before (a later claim), its dispatch history stays: the lease decides
                assert record.lease_token is not None
                self._unsent.failed(record, record.lease_token, self.clock())
            raise cut.interruption from None
        except BaseException as interrupted:
            if not _cut_short(interrupted):
                raise
            # recorded unknown now, so a restarted worker or the job's retry reconciles at once instead of
            # waiting out the lease
            kind = type(interrupted).__qualname__
            self._last_write(record, S.UNKNOWN, f"interrupted: {kind}", kind, sent_at=last_retry())
            raise
        self.crash_plan.hit(CrashPoint.AFTER_RESPONSE)
        try:
            result_id, digest = adapter.result_id(response), adapter.response_digest(response)
        except Exception as exc:  # an adapter bug after a real response: the effect happened, id unreadable
            unknown = self._finish(record, S.UNKNOWN, Verdict.of(exc, Outcome.UNKNOWN, "result_unreadable"))
            raise EffectUnknown(
                f"intent {record.intent_key!r}: the provider answered but the adapter could not read it",
                intent_key=record.intent_key,
                record=unknown,
            ) from exc
        confirmed = self._finish(
            record,
            S.CONFIRMED,
            None,
            method=method,
            result_id=result_id,
            response_digest=digest,
            before_commit=self._receipt_crash_hook(),
            sent_at=last_retry(),
        )
        return Receipt(record=confirmed, response=response)

    def _last_write(
        self, record: EffectRecord, to: EffectStatus, reason: str, error_class: str, *, sent_at: datetime | None = None
    ) -> bool:
        """Release ``record`` to ``to`` as a stopping call's last act: one write, no retries (the process may be
        stopping); whether it was written. Unwritten, the lease expires as for a worker killed outright.
        ``sent_at``: when the call's latest retry went out, if it made one."""
        changes: dict[str, Any] = {**_NO_LEASE, "last_error_class": error_class, "last_error_code": "interrupted"}
        if sent_at is not None:
            changes["dispatched_at"] = sent_at
        try:
            self._move(record, to, reason, changes)
        except Exception:  # a ledger that cannot take it now: see above
            return False
        return True

    def _lease_left(self, record: EffectRecord, contract: ProviderContract) -> float:
        """Seconds of ``record``'s lease left for another attempt, by this ledger's clock: until it lapses, less
        the time a normal answer may take where a takeover could send again meanwhile (:func:`answer_margin`).
        A retry started just before the lapse was answered after it, while another worker, finding the lease
        expired and the effect absent, sent the intent a second time."""
        ends = record.lease_expires_at
        if ends is None:
            return 0.0
        margin = answer_margin(contract, self._clock_guard.max_skew)
        return (ends - self.clock() - margin).total_seconds()

    def _receipt_crash_hook(self) -> Callable[[], None] | None:
        """Only a planned crash needs a hook inside the confirm transaction; without one it is one statement."""
        if CrashPoint.DURING_RECEIPT_PERSIST not in self.crash_plan.at:
            return None
        return lambda: self.crash_plan.hit(CrashPoint.DURING_RECEIPT_PERSIST)

    def _finish(
        self,
        record: EffectRecord,
        to: EffectStatus,
        verdict: Verdict | None,
        *,
        method: str = "provider_response",
        released: bool = False,
        result_id: str | None = None,
        response_digest: str | None = None,
        before_commit: Callable[[], None] | None = None,
        sent_at: datetime | None = None,
    ) -> EffectRecord:
        """Record this worker's outcome; if its lease was taken over, keep the outcome as evidence instead.
        ``sent_at``: when the call's latest retry went out, if it made one (the record's ``dispatched_at``)."""
        now = self.clock()
        changes: dict[str, Any] = dict(_NO_LEASE)
        if sent_at is not None:
            changes["dispatched_at"] = sent_at
        if verdict is not None:
            changes |= {"last_error_class": verdict.error_class, "last_error_code": verdict.error_code}
            result_id = result_id or verdict.provider_result_id
        if result_id is not None:
            changes["provider_result_id"] = result_id
        if response_digest is not None:
            changes["response_digest"] = response_digest
        if to in (S.CONFIRMED, S.REJECTED):
            changes |= {"resolved_at": now, "resolution": _resolution_by(method)}
        reason = "retryable refusals exhausted" if released else method if verdict is None else verdict.error_class
        # the dispatcher's own final answer is the record's last write: its columns say all an audit row would
        routine = method == "provider_response" and to in (S.CONFIRMED, S.REJECTED)
        try:
            try:
                finished = self._write_outcome(
                    record,
                    to,
                    now=now,
                    reason=reason,
                    changes=changes,
                    before_commit=before_commit,
                    audited=not routine,
                )
            except StaleRecord as lost:
                return self._lease_lost(record, to, result_id, lost)
        except LeaseLost:
            raise
        except Exception as down:  # LedgerUnavailable, or anything else that kept the answer from being written
            raise self._unrecorded(record, to, result_id, down) from down
        if method == "provider_response":
            self._observe("dispatch", finished, outcome=to.value)
        else:
            self._observe("reconciliation", finished, method=method, outcome=to.value)
        if to is S.UNKNOWN:
            _log.warning(
                "intent %r (tenant %r, %s %s) is unknown after %s: not resent; the reconciler looks it up, or an "
                "operator settles it (safe-effects show %s --tenant %s)",
                finished.intent_key, finished.tenant, finished.provider, finished.operation, reason,
                finished.intent_key, finished.tenant,
            )  # fmt: skip
        elif method != "provider_response":
            _log.info(
                "intent %r (tenant %r, %s) settled %s by %s, provider id %s",
                finished.intent_key, finished.tenant, finished.provider, to, method, finished.provider_result_id,
            )  # fmt: skip
        if finished.attempt_count > 1 and to in TERMINAL:  # sent before: an earlier attempt may have answered late
            self._raise_unrecorded_effects(finished)
        try:
            mark_original_compensated(self, finished)
        except LedgerUnavailable as down:  # the outcome is written; the next call of the compensation marks it
            _log.warning(
                "intent %r (tenant %r) is %s, but its original is not marked yet: %s",
                finished.intent_key, finished.tenant, to, down,
            )  # fmt: skip
        return finished

    def _write_outcome(self, record: EffectRecord, to: EffectStatus, **write: Any) -> EffectRecord:
        """Write a provider's answer, trying again while the ledger's database does not answer: until it is
        written, the answer exists only in this process. Safe to repeat: the write is conditional on the
        version, and an attempt that committed but whose acknowledgement was lost is recognised afterwards."""
        try:
            return self.store.transition(record, to, actor=self.worker_id, **write)
        except LedgerUnavailable:  # almost every write ends above: the retry machinery is built only now
            pass

        def again() -> EffectRecord:
            try:
                return self.store.transition(record, to, actor=self.worker_id, **write)
            except StaleRecord:
                if (mine := self._written_by_me(record, to, write["now"], write["changes"])) is not None:
                    return mine
                raise

        policy = self.retry
        retrying = Retrying(
            stop=stop_after_attempt(max(1, policy.max_attempts - 1)) | stop_after_delay(policy.max_total_seconds),
            wait=wait_exponential(multiplier=policy.initial_wait, max=policy.max_wait),
            retry=retry_if_exception_type(LedgerUnavailable),
            sleep=self._sleep,
            reraise=True,
        )
        self._sleep(policy.initial_wait)
        return retrying(again)

    def _written_by_me(
        self, record: EffectRecord, to: EffectStatus, now: datetime, changes: Mapping[str, Any]
    ) -> EffectRecord | None:
        """The record as this write left it, if that write is the latest; else None. The worker id alone does
        not tell: ledgers may share one (given before a fork), and another's lease takeover taken for this
        write would drop this late answer, which must be kept to stop a resend. So the write's time and every
        column it set must match too; a miss is safe (the answer is kept as a late one)."""
        current = self.store.get(record.tenant, record.intent_key)
        if current is None or current.status is not to or current.version != record.version + 1:
            return None
        if current.updated_by != self.worker_id or current.updated_at != now:
            return None
        return current if all(getattr(current, name) == value for name, value in changes.items()) else None

    def _unrecorded(
        self, record: EffectRecord, to: EffectStatus, result_id: str | None, down: Exception
    ) -> EffectUnknown:
        """The provider answered but the ledger stayed unavailable: the caller must not take it as success or
        failure. The lease is marked dead here, so this process's next call reconciles at once (by key replay
        or lookup) instead of waiting for the lease to run out; other processes wait for it to run out."""
        self._abandoned.add((record.tenant, record.intent_key, record.version))
        answer = f"{to}, provider id {result_id}" if result_id else str(to)
        _log.error(
            "intent %r (tenant %r, %s %s): the provider answered (%s) but the ledger could not record it (%s); "
            "it stays in flight until reconciled, never resent blindly",
            record.intent_key, record.tenant, record.provider, record.operation, answer, down,
        )  # fmt: skip
        then = "once its lease runs out" if isinstance(down, LedgerClosed) else "once the ledger answers"
        return EffectUnknown(
            f"intent {record.intent_key!r}: {record.provider} answered ({answer}) but the ledger could not record "
            f"it ({down}); the intent stays in flight until it is reconciled, never resent blindly: call again "
            f"{then}",
            intent_key=record.intent_key,
            record=record,
        )

    def _lease_lost(
        self, record: EffectRecord, to: EffectStatus, result_id: str | None, lost: StaleRecord
    ) -> EffectRecord:
        current = self.get(record.intent_key, tenant=record.tenant)
        if _answered_alike(current, to, result_id):
            return current  # the taker-over reached the same settled answer; nothing to reconcile
        # a late *unknown* is kept even when the record says unknown too: it tells a later reopen that this
        # attempt reached the provider and may have acted
        verdict = EvidenceVerdict.CONFIRMS if to is S.CONFIRMED else EvidenceVerdict.INFORMATIONAL
        if to is S.REJECTED and current.attempt_count == record.attempt_count:
            # a refusal settles the intent only while it answers the latest attempt: once another worker has
            # sent it again, this attempt's refusal says nothing about whether that later one acted
            verdict = EvidenceVerdict.REJECTS
        self.record_evidence(
            Evidence(
                tenant=record.tenant,
                intent_key=record.intent_key,
                provider=record.provider,
                source=LATE_RESPONSE,
                # unique per record and version: evidence ids are unique per (provider, source) only, and a key
                # purged and recorded again restarts its versions
                event_id=f"{self.worker_id}:{record.tenant}:{record.intent_key}:{record.version}"
                f"@{record.created_at:%Y%m%dT%H%M%S.%f}",
                kind=to.value,
                verdict=verdict,
                provider_result_id=result_id,
                received_at=self.clock(),
                # the attempt it answers: a refusal of it says nothing about a later attempt (see answers_latest)
                detail={
                    "worker": self.worker_id,
                    "attempt": record.attempt_count,
                    "record_created_at": record.created_at.isoformat(),  # the record it answers (see about)
                },
            )
        )
        current = self.get(record.intent_key, tenant=record.tenant)
        if _answered_alike(current, to, result_id):
            return current  # this answer, kept as evidence, settled the intent: the caller gets it as on time
        raise LeaseLost(
            f"intent {record.intent_key!r}: worker {self.worker_id} finished ({to}) after its lease was "
            f"taken over; its answer was kept as evidence and the intent is {current.status} (see e.record)",
            intent_key=record.intent_key,
            record=current,
        ) from lost

    # -- small helpers ------------------------------------------------------------------------------------

    def _tenant(self, tenant: str) -> str:
        tenant = check_tenant(tenant)
        if self.tenants is not None and tenant not in self.tenants:
            alike = sorted(t for t in self.tenants if t.casefold() == tenant.casefold())
            hint = f"; tenant ids are case-sensitive: did you mean {alike[0]!r}?" if alike else ""
            raise UnknownTenant(
                f"tenant {tenant!r} is not served by this ledger (Ledger(tenants=...) names {len(self.tenants)}){hint}"
            )
        return tenant

    def _check_digest(self, record: EffectRecord, fresh: EffectRecord) -> None:
        """Refuse ``fresh``, a call of ``record``'s intent, unless it is the recorded request."""
        if record.request_digest != fresh.request_digest:
            self._observe("intent_conflict", record)
            recorded_as = f"{record.provider} {record.operation}, {record.status}"
            next_key = None
            with contextlib.suppress(InvalidIntentKey):  # a key at the length limit has no room for a digit more
                next_key = record.intent_key.next_version()
            conflict = IntentConflict(
                record.tenant,
                record.intent_key,
                record.request_digest,
                fresh.request_digest,
                recorded_as=recorded_as,
                differs_in=record.differences_from(fresh),
                next_key=next_key,
                reached_provider=_REACHED_PROVIDER.get(record.status),
                withdraw_first=record.status is S.PREPARED,
                record=record,
            )
            _log.warning("%s", conflict)  # a caller's bug: the runbook sends the operator to this line for the key
            raise conflict

    @staticmethod
    def _rejected(record: EffectRecord, error: BaseException | None) -> EffectRejected:
        # an adapter's own refusal never left this process, and a person's decision is not the provider's: say
        # who decided, and why, rather than blame the provider
        settled_by = record.resolution
        if isinstance(error, InvalidInput):
            why = f"the {record.provider} adapter before sending: {error}"
        elif settled_by is not None and settled_by.operator is not None:
            why = f"operator {settled_by.operator} ({settled_by.reason or 'no reason given'})"
        elif settled_by is not None and settled_by.method.startswith("evidence:"):  # not the error it ended with
            why = f"{record.provider}, as its event {settled_by.evidence} says"
        elif settled_by is not None and settled_by.method.startswith("lookup:"):  # nor the timeout before it
            why = f"{record.provider}, as a lookup ({settled_by.method}) found: {settled_by.evidence or 'refused'}"
        else:
            why = f"{record.provider} ({record.last_error_class or 'rejected'}: {record.last_error_code or 'no code'})"
        return EffectRejected(
            f"intent {record.intent_key!r} was rejected by {why}",
            intent_key=record.intent_key,
            record=record,
            provider_error=error,
        )

    def _observe(self, event: str, record: EffectRecord, **labels: str) -> None:
        merged: Mapping[str, str] = {"provider": record.provider, "tenant": record.tenant, **labels}
        self.observer.on_event(event, merged)
