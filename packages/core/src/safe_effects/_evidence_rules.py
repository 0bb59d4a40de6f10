"""Which recorded evidence speaks for a record, and what it says.

Evidence outlives the record it is about: a settled record may be purged and its key recorded again, a webhook
retried for days, a late worker's answer filed after another attempt. Every decision the ledger takes on
evidence (settle, reopen, refuse an operator, raise an unrecorded effect) reads it through these rules.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from ._errors import InvalidInput
from ._records import EffectRecord, Evidence, EvidenceVerdict
from ._states import EffectStatus as S
from ._store import Store

LATE_RESPONSE = "late_response"  # the evidence source of an answer that came after its worker's lease
DECISIVE = frozenset({EvidenceVerdict.REJECTS, EvidenceVerdict.CONFIRMS})  # settle an unknown intent alone

# the evidence detail key where an adapter keeps the provider's own time of the event (ISO 8601 with a zone)
OCCURRED_AT = "occurred_at"
# how far a provider's clock may run behind the worker that created a record: an event the provider stamped
# earlier than that is about an earlier send of the key (a purged record's, or another environment's event
# posted to this endpoint again), never this record's
PROVIDER_CLOCK_SKEW = timedelta(minutes=5)

# how far the clocks of the processes that write audit rows (or stamp events an operator's resolution must not
# contradict) may run behind the one that created a record; a purged record's audit rows are older than the
# purge floor (days), as its last write is what the floor measures
CLOCK_SKEW = timedelta(hours=1)


# UTF-8 bytes of the names an event is deduplicated by, UNIQUE (provider, source, event_id): well within
# PostgreSQL's btree row limit (2,704 bytes), which would otherwise refuse a long one as a failed write
_NAME_BYTES = {"provider": 200, "source": 200, "event_id": 1000, "kind": 200}


def check_evidence_names(evidence: Evidence) -> None:
    """Refuse evidence whose names cannot do their job: a blank ``event_id`` would make the next blank one a
    "duplicate", dropping it (a rejection after an acceptance, say); one too long for the dedupe index would
    fail the write on PostgreSQL as if the database were down, and a webhook would retry it for ever."""
    for name, limit in _NAME_BYTES.items():
        value: str = getattr(evidence, name)
        if not value.strip():
            raise InvalidInput(f"evidence {name} must not be blank; nothing was recorded")
        if len(value.encode("utf-8", "surrogatepass")) > limit:
            raise InvalidInput(f"evidence {name} takes at most {limit} bytes (UTF-8); nothing was recorded")


def own_evidence(
    store: Store,
    record: EffectRecord,
    *,
    allowance: timedelta = timedelta(0),
    verdicts: Collection[EvidenceVerdict] | None = None,
) -> list[Evidence]:
    """Evidence recorded for this record by its own provider (another provider's event decides nothing),
    only of ``verdicts`` when given.

    Evidence stays when a settled record is purged, and the key may be recorded again: what was received
    before this record was created (less ``allowance``, see :func:`about`) is about the purged one."""
    recorded = store.evidence_for(record.tenant, record.intent_key, verdicts=verdicts)
    return [e for e in recorded if e.provider == record.provider and about(e, record, allowance)]


def acted_evidence(store: Store, record: EffectRecord) -> list[Evidence]:
    """Its own provider's answers or events confirming it acted (an acceptance may still be refused)."""
    return [e for e in own_evidence(store, record) if e.verdict is EvidenceVerdict.CONFIRMS]


def written_since(at: datetime, record: EffectRecord) -> bool:
    """Was an audit row written at ``at`` about ``record``, not about a purged record of its key?"""
    return at >= record.created_at - CLOCK_SKEW


def about(evidence: Evidence, record: EffectRecord, allowance: timedelta) -> bool:
    """Is ``evidence`` about ``record``, not about a purged record of its key?

    A late answer names the record it answers (its creation time), whatever the clocks say. A provider's event
    can arrive any time, a purged record's too (a webhook retried for days), so for what the ledger decides by
    itself only one received after this record was created counts: a host clock behind the creator's leaves a
    real one to a lookup or a person, never lets an old one decide. Where the adapter kept the provider's own
    time of the event (``detail[OCCURRED_AT]``), one the provider stamped before the record was created (less
    :data:`PROVIDER_CLOCK_SKEW`) never counts, whenever it arrives. ``allowance`` widens both for checks that
    only refuse (an operator's resolution the provider's events contradict).
    """
    answered = evidence.detail.get("record_created_at") if evidence.source == LATE_RESPONSE else None
    if isinstance(answered, str):
        return _instant(answered) == record.created_at  # the same instant, in whatever zone the worker's clock
    occurred = _instant(evidence.detail.get(OCCURRED_AT))
    if occurred is not None and occurred < record.created_at - max(allowance, PROVIDER_CLOCK_SKEW):
        # the provider says it happened before this record existed: an event received again later (a signed
        # one the ledger skipped as unmatched has no id on file to be a duplicate of) decides nothing here
        return False
    return evidence.received_at >= record.created_at - allowance


def _instant(text: object) -> datetime | None:
    """``text`` as an aware instant, or None where it is none (a naive time is no instant to compare)."""
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.utcoffset() is not None else None


def answers_latest(evidence: Evidence, record: EffectRecord) -> bool:
    """False for a late refusal of an earlier attempt: the intent was sent again after it (written between
    the late worker's read of the record and its evidence), and it says nothing about whether that one acted."""
    if evidence.source != LATE_RESPONSE or evidence.verdict is not EvidenceVerdict.REJECTS:
        return True
    answered: object = evidence.detail.get("attempt", record.attempt_count)  # none from earlier releases
    return answered == record.attempt_count


def shows_an_unrecorded_effect(record: EffectRecord, evidence: Evidence) -> bool:
    """Evidence of an effect the record does not show: a rejected intent the provider took, or a late answer
    naming another object than the confirmed one (its ids come from the same adapter, so they compare)."""
    if record.status is S.REJECTED:
        # an acceptance (SES Send, SendGrid processed) may come with a refusal (Reject, dropped): only a
        # confirmation says the provider carried it out
        return evidence.verdict is EvidenceVerdict.CONFIRMS
    return (
        record.status in (S.CONFIRMED, S.COMPENSATED)
        and evidence.source == LATE_RESPONSE
        and evidence.verdict is EvidenceVerdict.CONFIRMS
        and None not in (evidence.provider_result_id, record.provider_result_id)
        and evidence.provider_result_id != record.provider_result_id
    )


def silent(evidence: Evidence) -> bool:
    """Evidence that says nothing about whether an attempt acted: informational, and not a late answer."""
    return evidence.verdict is EvidenceVerdict.INFORMATIONAL and evidence.source != LATE_RESPONSE
