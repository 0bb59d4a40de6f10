"""Event Webhook ingestion: SendGrid's event batches become ledger evidence, one fact per event, once."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from safe_effects import (
    OCCURRED_AT,
    Evidence,
    EvidenceVerdict,
    IntentKey,
    InvalidInput,
    Ledger,
    UnknownTenant,
    check_tenant,
    holds_unstorable_text,
    request_digest,
)

from . import _rules
from ._signature import PublicKey, load_public_key, verify_signature

SOURCE = "sendgrid_webhook"
_log = logging.getLogger("sendgrid_safe")
Fate = Literal["recorded", "duplicates", "foreign", "unmatched", "malformed"]


class MalformedWebhook(InvalidInput):
    """The POST body is not a JSON array of events; nothing was recorded."""

    code = "malformed_webhook"


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What one POST did: SendGrid redelivers batches, so duplicates are normal."""

    events: int = 0
    recorded: int = 0  # new evidence stored (and any unknown intent it decides settled)
    duplicates: int = 0  # evidence already stored from an earlier delivery of the same event
    foreign: int = 0  # no safe_effects custom_args: not sent through sendgrid_safe
    unmatched: int = 0  # our custom_args, but no such intent (or tenant) in this ledger
    malformed: int = 0  # not an event object, or our fields are invalid


def ingest_events(
    ledger: Ledger, body: bytes, headers: Mapping[str, str], *, public_key: str | PublicKey | None
) -> IngestReport:
    """Verify (when a key is given), parse and record one Event Webhook POST; returns the counts."""
    if public_key is not None:
        verify_signature(load_public_key(public_key), body, headers)
    try:
        events = json.loads(body)
    except (ValueError, RecursionError) as error:  # RecursionError: nesting deeper than the parser goes
        raise MalformedWebhook(f"event webhook body is not JSON: {error}") from error
    if not isinstance(events, list):
        raise MalformedWebhook(f"event webhook body must be a JSON array, got {type(events).__name__}")
    now = ledger.clock()
    unmatched: dict[str, None] = {}  # tenant/intent named by events with no record here, in order, once each
    fates: Counter[str] = Counter(_ingest_one(ledger, event, now, unmatched) for event in events)
    if fates["unmatched"]:
        named = list(unmatched)
        _log.warning(
            "%d SendGrid event(s) name intents this ledger has no record of (%s%s), not stored: another "
            "ledger's, a tenant it does not serve, or, after a restore from a backup, intents whose records were "
            "lost (docs/operations.md, Backups and restores)",
            fates["unmatched"], ", ".join(named[:_NAMED_IN_LOG]),
            f" and {len(named) - _NAMED_IN_LOG} more" if len(named) > _NAMED_IN_LOG else "",
        )  # fmt: skip
    return IngestReport(events=len(events), **fates)


_NAMED_IN_LOG = 10  # intents a warning names: enough to find them, bounded for a batch of thousands


def _ingest_one(ledger: Ledger, event: Any, now: datetime, unmatched: dict[str, None]) -> Fate:
    evidence = parse_event(event, now)
    if not isinstance(evidence, Evidence):
        return evidence
    record = ledger.store.get(evidence.tenant, evidence.intent_key)
    if record is None or record.provider != _rules.PROVIDER:
        # never store evidence that could settle an intent of another ledger later, or another provider's intent
        return _unmatched(ledger, evidence, unmatched)
    try:
        return "recorded" if ledger.record_evidence(evidence) else "duplicates"
    except UnknownTenant:  # a tenant this ledger does not serve
        return _unmatched(ledger, evidence, unmatched)
    except InvalidInput:  # a name the ledger cannot keep (a blank or overlong event or id): the event's own fault
        return "malformed"


def _unmatched(ledger: Ledger, evidence: Evidence, unmatched: dict[str, None]) -> Literal["unmatched"]:
    ledger.observer.on_event("unmatched_evidence", {"provider": _rules.PROVIDER, "source": SOURCE})
    unmatched[f"{evidence.tenant}/{evidence.intent_key}"] = None
    return "unmatched"


def parse_event(event: Any, received_at: datetime) -> Evidence | Literal["foreign", "malformed"]:
    """One event as :class:`Evidence`, or why it is skipped. An event holding text no store can hold (a lone
    surrogate or NUL escape, valid JSON) is malformed alone: the rest of its batch counts, where refusing the
    POST would have SendGrid retry it for a day, then drop every event in it."""
    if not isinstance(event, dict) or not isinstance(event.get("event"), str) or holds_unstorable_text(event):
        return "malformed"
    intent, tenant = event.get(_rules.INTENT_ARG), event.get(_rules.TENANT_ARG)
    if intent is None and tenant is None:
        return "foreign"
    sg_message_id = event.get("sg_message_id")
    verdict = _rules.event_verdict(event)
    try:
        key, tenant = IntentKey.parse(intent), check_tenant(tenant)
        event_id = event.get("sg_event_id") or request_digest(event)  # redelivery carries the same id
    except InvalidInput:
        return "malformed"
    if not isinstance(event_id, str) or not (sg_message_id is None or isinstance(sg_message_id, str)):
        return "malformed"
    if verdict in (EvidenceVerdict.CONFIRMS, EvidenceVerdict.ACCEPTS) and not sg_message_id:
        return "malformed"  # a delivery event without the message id confirms nothing we can cite
    return Evidence(
        tenant=tenant,
        intent_key=key,
        provider=_rules.PROVIDER,
        source=SOURCE,
        event_id=event_id,
        kind=event["event"],
        verdict=verdict,
        provider_result_id=_rules.message_id_of(sg_message_id) if sg_message_id else None,
        received_at=received_at,
        detail=_detail(event),
    )


_PLAIN_REASON = re.compile(r"[A-Za-z0-9 ()'.-]{1,60}")  # a dropped event's reason kept as SendGrid words it
_BOUNCE_TYPES = frozenset({"bounce", "blocked", "expired"})  # a bounce event's ``type``; any other is "unlisted"
_UNIX_TIME = re.compile(r"[0-9]{1,12}")  # a timestamp as SendGrid sends it, seconds since 1970


def _utc_from_unix(seconds: int) -> str | None:
    """SendGrid's event time as ISO 8601 UTC, or None past the years a datetime holds."""
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _detail(event: Mapping[str, Any]) -> dict[str, Any]:
    """Ids and SendGrid's fixed vocabularies only: no addresses, no SMTP text that may quote one."""
    detail: dict[str, Any] = {}
    if isinstance(event.get("sg_message_id"), str):
        detail["sg_message_id"] = event["sg_message_id"]
    if _UNIX_TIME.fullmatch(str(event.get("timestamp"))) and not isinstance(event.get("timestamp"), bool):
        detail["timestamp"] = event["timestamp"]
        if (occurred := _utc_from_unix(int(event["timestamp"]))) is not None:
            detail[OCCURRED_AT] = occurred  # an event older than the record is about an earlier send of its key
    if event.get("event") == "dropped" and isinstance(event.get("reason"), str):
        # SendGrid's reasons are short phrases ("Bounced Address", "Invalid"); anything else may quote an address
        detail["reason"] = event["reason"] if _PLAIN_REASON.fullmatch(event["reason"]) else "unlisted"
    if event.get("event") == "bounce" and isinstance(event.get("type"), str):
        detail["bounce_type"] = event["type"] if event["type"] in _BOUNCE_TYPES else "unlisted"
    if isinstance(event.get(_rules.RECIPIENTS_ARG), str):
        detail["recipients"] = event[_rules.RECIPIENTS_ARG]
    return detail
