"""How one unknown intent is settled, never by a guess: the evidence on file first, then a same-key replay where
the contract allows one, then a lookup at the provider, whose "absent" reopens the intent (``prepared``) only
while a resend is still safe; and why a reopened intent is reconciled again instead of resent.

The reconciler (``_reconciler.py``) sweeps many records through :meth:`Ledger.reconcile`; a caller's retry
comes here through the ledger's resume; an arriving event through :meth:`Ledger.record_evidence`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from ._adapter import HELD_BACK, LOOKUP_ERROR, EffectRequest, LookupResult, LookupStatus, ProviderAdapter
from ._contract import ProviderContract
from ._errors import EffectUnknown, LedgerUnavailable, StaleRecord
from ._evidence_rules import DECISIVE, answers_latest, own_evidence, silent, written_since
from ._records import EffectRecord, Evidence, EvidenceVerdict, Receipt, Resolution
from ._response_window import held_back
from ._states import EffectStatus as S

if TYPE_CHECKING:
    from ._ledger import Ledger

R = TypeVar("R")


def reconcile_for_caller(
    ledger: Ledger,
    adapter: ProviderAdapter[R],
    request: EffectRequest,
    record: EffectRecord,
    contract: ProviderContract,
) -> Receipt[R]:
    """A caller retried an unknown intent: evidence, then same-key replay if safe, then lookup."""
    settled = settle_by_evidence(ledger, record, contract)
    if settled is None and contract.can_replay(
        record.first_dispatched_at, ledger.clock(), last_error_code=record.last_error_code
    ):
        claimed = ledger._claim(record, request, reason="same-key replay within the provider's retention window")
        return ledger._dispatch(adapter, request, claimed, contract, method="key_replay")
    held_back = None
    if settled is None:
        settled, found = settle_by_lookup(ledger, adapter, record)
        held_back = found.detail.get(HELD_BACK)
    if settled is not None and settled.status is S.PREPARED:  # proven absent, where the contract allows
        return ledger._dispatch(adapter, request, ledger._claim(settled, request, reason="redispatch"), contract)
    if settled is not None and settled.status in (S.CONFIRMED, S.COMPENSATED):
        return Receipt(record=settled, from_ledger=True)
    if settled is not None and settled.status is S.REJECTED:
        raise ledger._rejected(settled, None)
    current = settled or record
    why = f"the lookup cannot settle it yet: {held_back}" if held_back else "no lookup could settle it"
    raise EffectUnknown(
        f"intent {record.intent_key!r} is unknown and {why}; it was not resent. "
        f"Reconcile later or resolve it as an operator with evidence",
        intent_key=record.intent_key,
        record=current,
    )


def settle_by_evidence(
    ledger: Ledger, record: EffectRecord, contract: ProviderContract | None = None
) -> EffectRecord | None:
    """Rejecting evidence wins over confirming evidence: a rejected message never went out.

    An acceptance (``accepts``) confirms only once ``contract.rejection_window`` has passed since it was
    received with no rejection, so the order events arrive in cannot decide; without a contract (evidence
    recorded by a webhook) it waits for the reconciler or the caller's retry. Only the record's own
    provider speaks for it: a SendGrid event naming a Stripe intent decides nothing.

    Only the evidence that can decide is read: each new event of an unknown intent sent to a thousand
    recipients would otherwise read all their acceptances again.
    """
    deciding = DECISIVE if contract is None else DECISIVE | {EvidenceVerdict.ACCEPTS}
    mine = [e for e in own_evidence(ledger.store, record, verdicts=deciding) if answers_latest(e, record)]
    by_verdict = {verdict: [e for e in mine if e.verdict is verdict] for verdict in EvidenceVerdict}
    decisive = by_verdict[EvidenceVerdict.REJECTS] or by_verdict[EvidenceVerdict.CONFIRMS]
    accepted = by_verdict[EvidenceVerdict.ACCEPTS]
    if not decisive and accepted and contract is not None and _past_rejection_window(ledger, accepted[0], contract):
        decisive = accepted
    if not decisive:
        return None
    fact = decisive[0]
    to = S.REJECTED if fact.verdict is EvidenceVerdict.REJECTS else S.CONFIRMED
    resolution = Resolution(method=f"evidence:{fact.source}", evidence=f"{fact.source}:{fact.event_id}")
    return ledger._settle(
        record,
        to,
        resolution=resolution,
        actor=ledger.worker_id,
        provider_result_id=fact.provider_result_id,
    )


def _past_rejection_window(ledger: Ledger, accepted: Evidence, contract: ProviderContract) -> bool:
    return accepted.received_at + contract.rejection_window <= ledger.clock()


def settle_by_lookup(
    ledger: Ledger, adapter: ProviderAdapter[Any], record: EffectRecord
) -> tuple[EffectRecord | None, LookupResult]:
    """The record as the lookup settled it (None when it settled nothing), and the lookup's result."""
    try:
        found = adapter.lookup(record)
    except Exception as exc:  # a failing lookup proves nothing
        found = LookupResult(LookupStatus.INCONCLUSIVE, LOOKUP_ERROR, detail={"error": repr(exc)})
    contract = adapter.contract_for(record.operation)
    if running := held_back(found, record, contract, ledger._clock_guard.max_skew, ledger.clock()):
        held = {**found.detail, "looked_up_as": found.status.value, HELD_BACK: running}
        found = LookupResult(LookupStatus.INCONCLUSIVE, found.method, evidence=found.evidence, detail=held)
    resolution = Resolution(method=f"lookup:{found.method}", evidence=found.evidence)
    if found.status is LookupStatus.FOUND:
        confirmed = ledger._settle(
            record,
            S.CONFIRMED,
            resolution=resolution,
            actor=ledger.worker_id,
            provider_result_id=found.provider_result_id,
            response_digest=found.response_digest,
        )
        return confirmed, found
    if found.status is LookupStatus.REFUSED:
        refused = ledger._settle(
            record,
            S.REJECTED,
            resolution=resolution,
            actor=ledger.worker_id,
            provider_result_id=found.provider_result_id,
        )
        return refused, found
    accepted = any(e.verdict is EvidenceVerdict.ACCEPTS for e in own_evidence(ledger.store, record))
    reopen = (
        found.status is LookupStatus.ABSENT
        and not accepted  # the provider said it took the request: a lookup's "absent" is lag, not proof
        and contract.may_reopen_when_absent(
            record.first_dispatched_at, ledger.clock(), last_error_code=record.last_error_code
        )
    )
    # found and refused are counted by settle(); the rest here, so one lookup is one event: a reopen by its new
    # status once written, like a settlement, and a held-back answer apart, as waiting out the response window
    # is not a lookup that cannot tell
    method = f"lookup:{found.method}"
    if reopen:
        reopened = ledger._move(record, S.PREPARED, f"proven absent by {method}")
        ledger._observe("reconciliation", record, method=method, outcome=S.PREPARED.value)
        return reopened, found
    ledger._observe("reconciliation", record, method=method, outcome=HELD_BACK if running else found.status.value)
    return None, found


def reconcile_before_resend(ledger: Ledger, record: EffectRecord, contract: ProviderContract) -> str | None:
    """Why a ``prepared`` intent that was sent before must be reconciled again instead of resent, or None.

    It was put back by a lookup's "absent". Since then the provider may have spoken (a late answer of the
    earlier attempt, an event), or the key window that made the reopen safe may have closed (a lagging
    search is no longer caught by the provider's dedupe).
    """
    if record.first_dispatched_at is None:
        return None  # never sent: nothing to reconcile
    if spoken := spoken_since_reopen(ledger, record):
        return spoken
    if contract.may_reopen_when_absent(
        record.first_dispatched_at, ledger.clock(), last_error_code=record.last_error_code
    ):
        return None  # still inside the window (or a provider whose lookups are proof)
    trail = ledger.store.audit_trail(record.tenant, record.intent_key)  # a purged record's rows come first
    if any(entry.to_status is S.UNKNOWN and written_since(entry.at, record) for entry in trail):
        return "reopened by a lookup, but the provider's key window closed before it was resent"
    return None


def spoken_since_reopen(ledger: Ledger, record: EffectRecord) -> str | None:
    """Why a ``prepared`` intent sent before must be reconciled: the provider has spoken about it, or None.

    A late answer of the earlier attempt counts even when it was a timeout: that attempt may have acted.
    """
    if record.first_dispatched_at is None:
        return None
    if any(not silent(e) for e in own_evidence(ledger.store, record)):
        return "reopened by a lookup, but the provider has spoken since"
    return None


def unknown_again(ledger: Ledger, record: EffectRecord, reason: str) -> EffectRecord:
    return ledger._move(record, S.UNKNOWN, reason)


def decide_by_evidence(ledger: Ledger, record: EffectRecord) -> EffectRecord:
    """Whatever the evidence on record now decides: an abandoned lease is unknown, a reopened intent the
    provider has spoken about is unknown again, an unknown one is settled if the evidence says how."""
    record = ledger._expire_lease(record)
    if record.status is S.PREPARED and (reason := spoken_since_reopen(ledger, record)):
        record = unknown_again(ledger, record, reason)  # reopened, then the provider spoke: settle it
    if record.status is S.UNKNOWN:
        record = settle_by_evidence(ledger, record) or record
    return record


def settled_while_in_flight(ledger: Ledger, unknown: EffectRecord, contract: ProviderContract) -> EffectRecord | None:
    """``unknown`` settled by provider events that arrived while its call was in flight (a webhook can beat
    the answer, which was then lost), or None: evidence recorded during a call decides nothing yet, and
    without this the caller would hear "unknown" with the answer on file."""
    if unknown.status is not S.UNKNOWN:
        return None
    try:
        return settle_by_evidence(ledger, unknown, contract)
    except (StaleRecord, LedgerUnavailable):  # moved on meanwhile, or not now: the next call reconciles
        return None
