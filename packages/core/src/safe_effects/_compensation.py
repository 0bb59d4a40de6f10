"""One original, one compensation: a compensation is named on its original before it is sent, and marks it
``compensated`` once confirmed (docs/architecture.md, step 6).

The ledger calls :func:`claim_compensation` before the compensating record is written, :func:`check_still_named`
right after, and :func:`mark_original_compensated` whenever a record settles confirmed (a crash between the two
commits is completed by the next call).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from ._adapter import LookupStatus, ProviderAdapter
from ._errors import IllegalTransition, StaleRecord
from ._evidence_rules import own_evidence, silent
from ._keys import IntentKey
from ._records import OPERATOR_METHOD, EffectRecord
from ._response_window import may_still_run
from ._states import EffectStatus as S

if TYPE_CHECKING:
    from ._ledger import Ledger

_log = logging.getLogger("safe_effects")


def _not_this_compensation(record: EffectRecord, original_key: IntentKey) -> IllegalTransition:
    linked = f"as compensating {record.compensates!r}" if record.compensates else "as a plain intent"
    return IllegalTransition(
        S.CONFIRMED.value,
        S.COMPENSATED.value,
        original_key,
        why=f"{record.intent_key!r} is already recorded {linked}; a compensation needs a key of its own",
    )


def claim_compensation(ledger: Ledger, fresh: EffectRecord, adapter: ProviderAdapter[Any]) -> None:
    """Before anything is written: the compensating key is free (or already this compensation), and the
    original names it, so one original never gets two compensations."""
    assert fresh.compensates is not None
    existing = ledger.store.get(fresh.tenant, fresh.intent_key)
    if existing is not None:
        if existing.compensates != fresh.compensates:
            raise _not_this_compensation(existing, fresh.compensates)
        ledger._check_digest(existing, fresh)
        if existing.status is S.REJECTED:
            raise ledger._rejected(existing, None)  # its answer, as any rerun of a rejected intent gets it
    original = _name(ledger, fresh.tenant, fresh.compensates, fresh.intent_key, adapter)
    if existing is None and original.status is S.COMPENSATED:
        # marked compensated only once this compensation was confirmed: its record was purged since
        why = f"its compensation {fresh.intent_key!r} was confirmed and its record purged since; nothing is sent"
        raise IllegalTransition(original.status.value, S.COMPENSATED.value, original.intent_key, why=why)


def _name(
    ledger: Ledger, tenant: str, original_key: IntentKey, compensation: IntentKey, adapter: ProviderAdapter[Any]
) -> EffectRecord:
    """Set ``compensated_by`` on the confirmed original, conditional on the version read; the original.

    The original stays ``confirmed`` until the compensation is confirmed. Of two compensations racing
    with different keys, one holds it; another key may take over only where ``_check_replaceable`` says
    the named one can never act.
    """
    original = ledger.get(original_key, tenant=tenant)
    while original.compensated_by != compensation:
        if original.status is not S.CONFIRMED:
            raise IllegalTransition(original.status.value, S.COMPENSATED.value, original.intent_key)
        if original.compensated_by is not None:
            _check_replaceable(ledger, original, adapter)
        try:
            original = _rename(ledger, original, compensation, f"compensation {compensation} about to be sent")
        except StaleRecord:
            original = ledger.get(original_key, tenant=tenant)
    return original


def _rename(ledger: Ledger, original: EffectRecord, compensation: IntentKey | None, reason: str) -> EffectRecord:
    """The one write that names (or, with None, un-names) the compensation on a confirmed original."""
    return ledger._move(original, S.CONFIRMED, reason, {"compensated_by": compensation})


def _check_replaceable(ledger: Ledger, original: EffectRecord, adapter: ProviderAdapter[Any]) -> None:
    """Refuse to take over the compensation ``original`` names unless the provider rejected it.

    Only a rejected compensation can never act again; any other state (even a name whose record was never
    written, by a worker lost in between) could still be sent by its own key, so that key is the way on. One an
    operator rejected after it was sent is looked up first: rejected with the lookup skipped, a refund that had
    gone through was replaced by a second one.
    """
    assert original.compensated_by is not None
    holder = ledger.store.get(original.tenant, original.compensated_by)
    if holder is not None and _never_acts_for(ledger, original, holder):
        if (found := _found_despite_rejection(ledger, holder, adapter)) is None:
            return
        raise IllegalTransition(
            S.CONFIRMED.value,
            S.COMPENSATED.value,
            original.intent_key,
            why=f"compensation {holder.intent_key!r} was rejected by hand, but {found}: where it acted, correct it "
            "to confirmed (safe-effects resolve --as confirmed) rather than compensate again; else try again once "
            "a lookup can show it did nothing",
        )
    if holder is None:
        state = "named, never recorded: run it again with its key"
    elif holder.status is S.REJECTED:
        state = "rejected, but a late answer says an earlier attempt may have acted: check at the provider"
    else:
        state = holder.status.value
    raise IllegalTransition(
        S.CONFIRMED.value,
        S.COMPENSATED.value,
        original.intent_key,
        why=f"compensation {original.compensated_by!r} holds it ({state}); settle that one first",
    )


def check_still_named(ledger: Ledger, record: EffectRecord, fresh: EffectRecord, *, created: bool) -> None:
    """After the compensating record is written: it is this compensation's and the original still names it.

    Only a lost race fails here (the key written meanwhile as something else, or a stale name taken over):
    nothing is sent, and a record this call created goes back to ``prepared``, never dispatched.
    """
    assert fresh.compensates is not None
    original = ledger.get(fresh.compensates, tenant=fresh.tenant)
    if record.compensates == fresh.compensates and original.compensated_by == fresh.intent_key:
        return
    if created:
        ledger._unclaim(record, "compensation refused before sending")
    if record.compensates != fresh.compensates:
        if original.status is S.CONFIRMED and original.compensated_by == fresh.intent_key:
            with contextlib.suppress(StaleRecord):  # moved on meanwhile: then it is not ours to clear
                why = f"compensation {fresh.intent_key} refused: the key is recorded as something else"
                _rename(ledger, original, None, why)
        raise _not_this_compensation(record, fresh.compensates)
    raise IllegalTransition(
        original.status.value,
        S.COMPENSATED.value,
        original.intent_key,
        why=f"compensation {original.compensated_by!r} took it over while this one was being recorded",
    )


def mark_original_compensated(ledger: Ledger, record: EffectRecord) -> None:
    """A confirmed compensating intent marks the intent it compensates as compensated."""
    if record.status is not S.CONFIRMED or record.compensates is None:
        return
    original = ledger.store.get(record.tenant, record.compensates)
    if original is None:
        return
    if original.status is S.COMPENSATED and original.compensated_by != record.intent_key:
        # another compensation was confirmed (or corrected) first while this one was on its way
        assert original.compensated_by is not None
        _two_compensations(ledger, original, record, original.compensated_by)
        return
    if original.status is not S.CONFIRMED:
        return
    # compensated_by is None on an original whose compensation was sent before holds were recorded
    if original.compensated_by not in (None, record.intent_key):
        # a rejected compensation corrected to confirmed, after another took the name over
        renamed = _rename_from_unsent(ledger, original, record)
        if renamed is None:
            return
        original = renamed
    try:
        marked = ledger._move(
            original, S.COMPENSATED, f"compensated by {record.intent_key}", {"compensated_by": record.intent_key}
        )
    except StaleRecord:
        current = ledger.store.get(record.tenant, record.compensates)
        if current is not None and current.status is S.COMPENSATED and current.compensated_by == record.intent_key:
            return  # a concurrent caller of this same compensation marked it first: the same answer
        raise
    ledger._observe("compensation", marked)


def _found_despite_rejection(ledger: Ledger, holder: EffectRecord, adapter: ProviderAdapter[Any]) -> str | None:
    """Why a compensation rejected by hand after it was sent may have acted (a lookup finds it, or cannot be
    made, or it may still be running), or None: rejected by the provider's own answer or a lookup, never sent,
    or found absent once it can no longer be running."""
    if holder.first_dispatched_at is None or holder.resolution is None or holder.resolution.method != OPERATOR_METHOD:
        return None
    if adapter.provider != holder.provider:
        return f"it was sent to {holder.provider!r} and this {adapter.provider!r} adapter cannot look it up"
    try:
        looked = adapter.lookup(holder)
    except Exception as failed:  # an adapter's failure proves nothing either way: refuse
        return f"looking it up failed ({type(failed).__name__})"
    if looked.status is LookupStatus.FOUND:
        return f"a lookup ({looked.method}) finds it at the provider as {looked.provider_result_id!r}"
    contract = adapter.contract_for(holder.operation)
    return may_still_run(holder, contract, ledger._clock_guard.max_skew, ledger.clock())


def _never_acts_for(ledger: Ledger, original: EffectRecord, holder: EffectRecord) -> bool:
    """The compensation ``original`` names can never act for it: its key is recorded as something else, or
    it was rejected and no late answer says an earlier attempt of it acted."""
    if holder.compensates != original.intent_key:
        return True  # the key was taken by something else after its naming worker was lost
    return holder.status is S.REJECTED and all(silent(e) for e in own_evidence(ledger.store, holder))


def _unacted(ledger: Ledger, original: EffectRecord) -> bool:
    """The compensation ``original`` names has not acted: never recorded, ``prepared`` (unsent, deferred,
    or proven absent), or unable to act (:func:`_never_acts_for`)."""
    assert original.compensated_by is not None
    holder = ledger.store.get(original.tenant, original.compensated_by)
    return holder is None or holder.status is S.PREPARED or _never_acts_for(ledger, original, holder)


def _rename_from_unsent(ledger: Ledger, original: EffectRecord, confirmed: EffectRecord) -> EffectRecord | None:
    """``original`` renamed to the confirmed compensation, if the one it names has not acted (see
    :func:`_unacted`), so its later calls are refused; else None, and two compensations may have acted:
    that is raised. A claim of the other one racing the rename is caught by looking at it again after."""
    assert original.compensated_by is not None
    named = original.compensated_by
    if _unacted(ledger, original):
        with contextlib.suppress(StaleRecord):  # moved on meanwhile: what it is now is looked at below
            renamed = _rename(ledger, original, confirmed.intent_key, f"compensation {confirmed.intent_key} acted")
            if _unacted(ledger, original):  # still so after the rename: its later calls are refused
                return renamed
            _two_compensations(ledger, renamed, confirmed, named)
            return renamed
    _two_compensations(ledger, original, confirmed, named)
    return None


def _two_compensations(ledger: Ledger, original: EffectRecord, confirmed: EffectRecord, other: IntentKey) -> None:
    """Two compensations of ``original`` may have acted: raised, since nothing here can undo one."""
    holder = ledger.store.get(original.tenant, other)
    _log.error(
        "intent %r (tenant %r) is compensated by %r, which acted, but %r (%s) was named as its compensation: "
        "both may have acted; check at the provider",
        original.intent_key, original.tenant, confirmed.intent_key, other, holder.status if holder else "gone",
    )  # fmt: skip
    ledger._observe("unrecorded_effect", original, source="compensation", status=original.status.value)
