"""What a settlement from outside the ledger's own reconciliation may not contradict: the provider's events.

An operator's resolution, or a caller's own tooling calling :meth:`Ledger.settle`, decides without the provider;
the events on file are the provider's own word. Rejecting a sent effect invites a second one under a new key;
confirming a refused one hides that nothing happened; a wrong id sends the next reader (a refund, a dispute) to
another object.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._approvals import Approval
from ._errors import InvalidInput
from ._records import EffectRecord, Evidence, EvidenceVerdict, Resolution
from ._states import EffectStatus

_TOOK = frozenset({EvidenceVerdict.CONFIRMS, EvidenceVerdict.ACCEPTS})  # events that name the object made


def check_settlement(  # settle's own arguments, checked together
    record: object,
    resolution: object,
    actor: object,
    provider_result_id: object,
    response_digest: object,
    *,
    detail: object,
    approval: object,
) -> None:
    """Refuse :meth:`Ledger.settle`'s arguments of the wrong type by name, before anything is read or written
    (they were raw ``TypeError`` or ``AttributeError`` from deep in the write, and a blank actor was written)."""
    if not isinstance(record, EffectRecord):
        raise InvalidInput(f"record must be an EffectRecord (Ledger.get), got {type(record).__name__}")
    if not isinstance(resolution, Resolution):
        raise InvalidInput(f"resolution must be a Resolution, got {type(resolution).__name__}")
    if not isinstance(actor, str) or not actor.strip():
        raise InvalidInput(f"actor must be a non-blank str naming who settles it, got {actor!r:.80}")
    for name, value in (("provider_result_id", provider_result_id), ("response_digest", response_digest)):
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{name} must be a str or None, got {type(value).__name__}")
    if detail is not None and not isinstance(detail, Mapping):
        raise InvalidInput(f"detail must be a mapping or None, got {type(detail).__name__}")
    if approval is not None and not isinstance(approval, Approval):
        raise InvalidInput(f"approval must be an Approval or None, got {type(approval).__name__}")


def refuse_contradicted(
    record: EffectRecord, to: EffectStatus, provider_result_id: str | None, own: list[Evidence]
) -> None:
    """:class:`InvalidInput` when ``own`` (the record's own provider's events about its latest attempt)
    contradicts settling ``record`` as ``to``: a rejection when an event says the provider took or did it (a
    webhook that came while the call was in flight, an SES ``Send`` still in its rejection window), a
    confirmation when an event says it refused, or one naming another object than the events do."""
    verdicts = {e.verdict for e in own}
    if to is EffectStatus.CONFIRMED and provider_result_id is not None:
        _refuse_another_object(record, own, provider_result_id)
    if to is EffectStatus.REJECTED:
        # an acceptance a refusal followed is waived (SES's Send, then its Reject), never a confirmation: one
        # recipient's delivery beside another's drop means the provider acted, and a rejection is sent again
        took = _TOOK if EvidenceVerdict.REJECTS not in verdicts else (EvidenceVerdict.CONFIRMS,)
        against = _first(own, *took)
    elif to is EffectStatus.CONFIRMED and EvidenceVerdict.CONFIRMS not in verdicts:
        against = _first(own, EvidenceVerdict.REJECTS)
    else:
        return
    if against is not None:
        raise InvalidInput(
            f"intent {record.intent_key!r} cannot be resolved as {to}: {against.source} event {against.event_id!r} "
            f"({against.kind}) says the provider {against.verdict}; run `reconcile`, which settles by evidence "
            "(an acceptance once its rejection window has passed), or check at the provider"
        )


def _refuse_another_object(record: EffectRecord, own: list[Evidence], provider_result_id: str) -> None:
    took = [e for e in own if e.verdict in _TOOK and e.provider_result_id]
    if took and provider_result_id not in {e.provider_result_id for e in took}:
        event = took[0]
        raise InvalidInput(
            f"intent {record.intent_key!r} cannot be confirmed as {provider_result_id!r}: {event.source} event "
            f"{event.event_id!r} ({event.kind}) names {event.provider_result_id!r}; check --provider-id (`show` "
            "lists the evidence)"
        )


def _first(evidence: list[Evidence], *verdicts: EvidenceVerdict) -> Evidence | None:
    return next((e for e in evidence if e.verdict in verdicts), None)
