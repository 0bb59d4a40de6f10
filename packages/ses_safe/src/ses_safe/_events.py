"""SES event notifications (an SNS envelope or an EventBridge event, optionally inside an SQS body) turned into
ledger evidence.

A forged Reject would settle an unknown send as rejected, which invites a resend, a duplicate email. Without
``signatures`` a payload is trusted as far as the path it came by: feed it only from a queue whose policy lets
only your SES topic in (an SQS subscription). With ``signatures`` (:class:`SnsSignatures`) every envelope's SNS
signature is verified first, which an HTTPS endpoint needs. Either way, pass ``expected_topic_arns`` so an
envelope from any other topic is refused.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from safe_effects import (
    OCCURRED_AT,
    Evidence,
    EvidenceVerdict,
    InvalidInput,
    Ledger,
    SafeEffectsError,
    UnknownTenant,
    bytes_digest,
    holds_unstorable_text,
)

from ._contract import PROVIDER
from ._sns_signature import SnsSignatureInvalid, SnsSignatures
from ._tags import INTENT_TAG, TENANT_TAG, first_tag, tenant_tag

SOURCE = "ses_event"
CONFIGURATION_SET_TAG = "ses:configuration-set"  # the tag SES adds to every event of a set's sends
_log = logging.getLogger("ses_safe")
# SES delivered, or tried to: it had passed its own checks and sent the message (one recipient's event speaks
# for the whole message, which a Reject would have stopped before any of them)
WENT_OUT = ("Delivery", "DeliveryDelay", "Bounce", "Complaint", "Open", "Click", "Subscription")
VERDICTS = {
    "Send": EvidenceVerdict.ACCEPTS,  # accepted; a Reject (virus found) may still follow: see rejection_window
    **dict.fromkeys(WENT_OUT, EvidenceVerdict.CONFIRMS),
    "Reject": EvidenceVerdict.REJECTS,
    "Rendering Failure": EvidenceVerdict.REJECTS,
}
# subtypes of a Bounce or Complaint SES makes itself for an address it will not send to (suppressed, or
# unsubscribed through SES list management): it took the call and tried no delivery
SUPPRESSED = frozenset({"Suppressed", "OnAccountSuppressionList", "UnsubscribedRecipient"})
_SUBTYPE = {"Bounce": ("bounce", "bounceSubType"), "Complaint": ("complaint", "complaintSubType")}
_MAX_PAYLOAD = 256 * 1024  # SNS and SQS cap a message at 256 KiB; anything larger is not an SES event
# An EventBridge event destination puts each event on the default bus as ``detail``, named by ``detail-type``.
# Only AWS may put events whose source starts "aws." (PutEvents refuses it), so "aws.ses" says SES wrote it.
EVENTBRIDGE_SOURCE = "aws.ses"
SENDING_DETAIL_TYPES = {
    "Email Sent": "Send",
    "Email Delivered": "Delivery",
    "Email Delivery Delayed": "DeliveryDelay",
    "Email Bounced": "Bounce",
    "Email Complaint Received": "Complaint",
    "Email Rejected": "Reject",
    "Email Rendering Failed": "Rendering Failure",
    "Email Opened": "Open",
    "Email Clicked": "Click",
    "Email Subscribed": "Subscription",
}


class IngestOutcome(StrEnum):
    RECORDED = "recorded"  # new evidence stored (and an unknown intent settled if it decides it)
    DUPLICATE = "duplicate"  # this event was ingested before
    MALFORMED = "malformed"  # not JSON (or text no store holds), not an SES event, or missing mail.messageId
    FOREIGN = "foreign"  # an SES event without our tags: another sender on the same configuration set
    UNMATCHED = "unmatched"  # our tags, but no intent in this ledger (or another tenant's)


@dataclass(frozen=True, slots=True)
class IngestResult:
    outcome: IngestOutcome
    event_type: str | None = None
    evidence: Evidence | None = None
    reason: str | None = None


class UntrustedTopic(SafeEffectsError):
    """An SNS envelope from a topic not among ``expected_topic_arns`` (or no envelope to tell): refused, nothing
    recorded. Unless signatures are verified, the topic is what tells an SES event from a forged one."""

    code = "untrusted_topic"

    def __init__(self, topic_arn: str | None) -> None:
        self.topic_arn = topic_arn
        # a forged envelope's TopicArn is anyone's text: quoted, and cut to a length an ARN never exceeds
        came = (
            f"from topic {topic_arn[:256]!r}" if topic_arn is not None else "without an SNS envelope naming its topic"
        )
        super().__init__(f"an SES event {came}, not one of the expected_topic_arns: refused, nothing recorded")


class _Malformed(ValueError):
    """Internal: the payload is not a well-formed SES event."""


class _NotASend(_Malformed):
    """Internal: an SES event about the account (an EventBridge rule on ``source: aws.ses`` takes those too, such
    as "Sending Status Disabled"), not about a send: foreign, not malformed."""


def _loads(payload: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(payload, Mapping):
        parsed = payload
    else:
        if len(payload) > _MAX_PAYLOAD:
            raise _Malformed(f"payload of {len(payload)} bytes is larger than any SNS message")
        try:
            parsed = json.loads(payload)
        except (ValueError, RecursionError) as error:  # RecursionError: nesting deeper than the parser goes
            raise _Malformed(f"not JSON: {error}") from error
        if not isinstance(parsed, Mapping):
            raise _Malformed(f"JSON {type(parsed).__name__}, not an object")
    if holds_unstorable_text(parsed):
        raise _Malformed("a lone UTF-16 surrogate or NUL escape: not text SNS or SES sends")
    return parsed


def unwrap(payload: str | bytes | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The SES event and a stable event id, from an SQS message, an SNS envelope, an EventBridge event or a bare
    event."""
    event, event_id, _ = _opened(payload)
    return event, event_id


def _opened(
    payload: str | bytes | Mapping[str, Any], signatures: SnsSignatures | None = None
) -> tuple[Mapping[str, Any], str, str | None]:
    """:func:`unwrap`, and the envelope's ``TopicArn`` (None for a bare event, or an envelope without one); with
    ``signatures``, only from an envelope whose signature they verify (:class:`SnsSignatureInvalid`)."""
    outer = _loads(payload)
    if isinstance(outer.get("Body"), str) and "ReceiptHandle" in outer:  # a boto3 SQS message
        outer = _loads(outer["Body"])
    if signatures is not None:
        if outer.get("Type") != "Notification":
            raise SnsSignatureInvalid("no SNS notification envelope to verify (raw message delivery?): refused")
        signatures.verify(outer)
    if outer.get("Type") == "Notification" and isinstance(outer.get("Message"), str):
        event = _loads(outer["Message"])
        envelope_id = outer.get("MessageId")
        event_id = envelope_id if isinstance(envelope_id, str) and envelope_id else bytes_digest(outer["Message"])
        topic = outer.get("TopicArn")
        return event, event_id, topic if isinstance(topic, str) else None
    if outer.get("source") == EVENTBRIDGE_SOURCE and "detail-type" in outer:
        bus_id = outer.get("id")  # EventBridge's own id of the event, the same on every redelivery
        return _eventbridge_detail(outer), bus_id if isinstance(bus_id, str) and bus_id else _digest(outer), None
    return outer, _digest(outer), None


def _digest(outer: Mapping[str, Any]) -> str:
    """A stable id for a payload that carries none of its own: the digest of its canonical JSON."""
    try:
        canonical = json.dumps(outer, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError) as error:  # a caller's mapping: keys of mixed types, a cycle
        raise _Malformed(f"event is not JSON-shaped: {error}") from error
    return bytes_digest(canonical)


def _eventbridge_detail(outer: Mapping[str, Any]) -> Mapping[str, Any]:
    """The SES event an EventBridge event carries as ``detail``, with the ``eventType`` its ``detail-type`` names
    (some detail objects leave it out); the two disagreeing is malformed (one of them was not written by SES)."""
    detail, detail_type = outer.get("detail"), outer.get("detail-type")
    if not isinstance(detail, Mapping) or not isinstance(detail_type, str):
        raise _Malformed("an EventBridge event from aws.ses without a detail object or a detail-type")
    named, given = SENDING_DETAIL_TYPES.get(detail_type), _type_of(detail)
    if named is None:
        raise _NotASend(f"EventBridge {detail_type[:64]!r} is not an event of a send")
    if given is not None and given != named:
        raise _Malformed(f"EventBridge detail-type {detail_type[:64]!r} but eventType {given[:64]!r}")
    return {**detail, "eventType": named}


def checked_topics(expected_topic_arns: Collection[str] | None) -> frozenset[str] | None:
    """``expected_topic_arns`` as a set, refused as :class:`InvalidInput` if it could only be a mistake: a bare
    string (a collection of characters) or an empty collection (which would refuse every event)."""
    if expected_topic_arns is None:
        return None
    if isinstance(expected_topic_arns, str | bytes):
        raise InvalidInput(f"expected_topic_arns takes a collection of ARNs, got the string {expected_topic_arns!r}")
    topics = frozenset(expected_topic_arns)
    if not topics or not all(topics):
        raise InvalidInput("expected_topic_arns must name at least one topic ARN, and no empty one")
    return topics


def _unmatched(ledger: Ledger, kind: str, reason: str) -> IngestResult:
    """An event that may not speak for any intent here: counted (after a restore, a lost send's trace), not stored."""
    ledger.observer.on_event("unmatched_evidence", {"provider": PROVIDER, "source": SOURCE})
    return IngestResult(IngestOutcome.UNMATCHED, kind, reason=reason)


# SES's fixed vocabularies an operator needs to tell a bounced or complained-of mail from a delivered one
_KEPT_TYPES = {
    "bounce": (("bounceType", "bounce_type"), ("bounceSubType", "bounce_subtype")),
    "complaint": (("complaintFeedbackType", "complaint_type"), ("complaintSubType", "complaint_subtype")),
}
_PLAIN_TYPE = re.compile(r"[A-Za-z-]{1,40}")


def _detail(event: Mapping[str, Any], mail: Mapping[str, Any]) -> dict[str, str]:
    """The send's time and, for a bounce or complaint, its type and subtype: never addresses or diagnostic
    text, which may quote one."""
    detail = {"mail_timestamp": str(mail.get("timestamp", ""))}
    if isinstance(mail.get("timestamp"), str):  # every event of a send carries the send's ISO 8601 time: one
        detail[OCCURRED_AT] = mail["timestamp"]  # before the record is about an earlier send (see OCCURRED_AT)
    for field, names in _KEPT_TYPES.items():
        found = event.get(field)
        if not isinstance(found, Mapping):
            continue
        for name, kept_as in names:
            value = found.get(name)
            if isinstance(value, str) and _PLAIN_TYPE.fullmatch(value):
                detail[kept_as] = value
    return detail


def _type_of(event: Mapping[str, Any]) -> str | None:
    """``eventType`` (event publishing), else ``notificationType`` (an identity's notifications)."""
    kind = event.get("eventType", event.get("notificationType"))
    return kind if isinstance(kind, str) and kind else None


def _event_type(event: Mapping[str, Any]) -> str:
    kind = _type_of(event)
    if kind is None:
        raise _Malformed("no eventType")
    return kind


def event_verdict(event: Mapping[str, Any]) -> EvidenceVerdict:
    """What one SES event (unwrapped, see :func:`unwrap`) says about the send. SES's own bounce or complaint
    for a suppressed address reads like ``Send`` (which SES still counts for it): the call was taken, not that
    the message passed SES's checks. An event without a type says nothing."""
    kind = _type_of(event)
    if kind in _SUBTYPE:
        field, name = _SUBTYPE[kind]
        detail = event.get(field)
        subtype = detail.get(name) if isinstance(detail, Mapping) else None
        if isinstance(subtype, str) and subtype in SUPPRESSED:
            return EvidenceVerdict.ACCEPTS
    return EvidenceVerdict.INFORMATIONAL if kind is None else VERDICTS.get(kind, EvidenceVerdict.INFORMATIONAL)


def ingest_event(
    ledger: Ledger,
    payload: str | bytes | Mapping[str, Any],
    *,
    signatures: SnsSignatures | None,
    expected_topic_arns: Collection[str] | None = None,
) -> IngestResult:
    """Record one SES event as evidence for the intent named by its tags; anything odd is skipped, never raised,
    but for an envelope that is refused (below): :class:`UntrustedTopic`, :class:`SnsSignatureInvalid`, or
    :class:`SnsCertificateUnavailable` when its signature cannot be checked now.

    The event comes as SNS delivers it (an envelope, or the bare event with raw message delivery) or as an
    EventBridge rule delivers it (``source`` "aws.ses", the event as ``detail``), either one as an SQS body.
    EventBridge signs nothing and names no topic: such a payload is trusted as far as the queue it came by,
    like an SNS one without ``signatures``, and is refused when ``signatures`` or ``expected_topic_arns`` is given.

    ``signatures``: verify each envelope's SNS signature first (:class:`SnsSignatures`); a payload that is not
    a signed SNS notification records nothing. Required wherever an outsider could post, such as an HTTPS
    endpoint. ``None`` says the payload comes from a trusted queue (an SQS subscription whose policy admits
    only your SES topic): anywhere else anyone could post a forged Reject that settles an unknown send as
    rejected and so invites a duplicate email, which is why there is no default (as for SendGrid's
    ``public_key``).
    ``expected_topic_arns``: the SNS topics your SES events are published to; an envelope from any other
    topic, or a payload with no envelope to tell, raises :class:`UntrustedTopic` and records nothing. Without
    it every topic is taken, as before.
    """
    topics = checked_topics(expected_topic_arns)
    try:
        event, event_id, topic = _opened(payload, signatures)
        if topics is not None and topic not in topics:
            raise UntrustedTopic(topic)
        kind = _event_type(event)
        mail = event.get("mail")
        if not isinstance(mail, Mapping):
            raise _Malformed("no mail.messageId")
        message_id = mail.get("messageId")
        if not isinstance(message_id, str) or not message_id.strip():
            raise _Malformed("no mail.messageId")
    except _NotASend as error:
        return IngestResult(IngestOutcome.FOREIGN, reason=str(error))
    except _Malformed as error:
        return IngestResult(IngestOutcome.MALFORMED, reason=str(error))
    tags = mail.get("tags")
    intent, tenant = first_tag(tags, INTENT_TAG), first_tag(tags, TENANT_TAG)
    if intent is None or tenant is None:
        return IngestResult(IngestOutcome.FOREIGN, kind, reason="no safe-effects tags")
    candidates = ledger.store.find_by_provider_key(PROVIDER, intent)
    record = next((r for r in candidates if tenant_tag(r.tenant) == tenant), None)
    if record is None:
        _log.warning(
            "an SES %s event names an intent this ledger has no record of (tag %r, tenant tag %r), not stored: "
            "another ledger's, a tenant it does not serve, or, after a restore from a backup, an intent whose "
            "record was lost (docs/operations.md, Backups and restores)",
            kind, intent, tenant,
        )  # fmt: skip
        return _unmatched(ledger, kind, f"no intent for tag {intent!r} / {tenant!r}")
    sent_with, published_by = record.summary.get("configuration_set"), first_tag(tags, CONFIGURATION_SET_TAG)
    if sent_with is not None and published_by != sent_with:
        # our tags, but published by another configuration set than the send's: another account's or tenant's
        # sender can write any tags, so only the set the send went through speaks for it
        return _unmatched(ledger, kind, f"published by configuration set {published_by!r}, the send used {sent_with!r}")
    evidence = Evidence(
        tenant=record.tenant,
        intent_key=record.intent_key,
        provider=PROVIDER,
        source=SOURCE,
        event_id=event_id,
        kind=kind,
        verdict=event_verdict(event),
        provider_result_id=message_id,
        received_at=ledger.clock(),
        detail=_detail(event, mail),
    )
    try:
        recorded = ledger.record_evidence(evidence)
    except UnknownTenant:
        raise  # the record is this store's, its tenant not this ledger's: a misconfiguration, kept on the queue
    except InvalidInput as refused:  # a name the ledger cannot keep (a blank or overlong type or id): the payload's
        return IngestResult(IngestOutcome.MALFORMED, kind, reason=str(refused))
    outcome = IngestOutcome.RECORDED if recorded else IngestOutcome.DUPLICATE
    return IngestResult(outcome, kind, evidence)
