"""Builders for SES event notifications shaped like the ones SNS or EventBridge delivers, for tests that feed a
queue."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ses_safe import INTENT_TAG, TENANT_TAG
from ses_safe._events import SENDING_DETAIL_TYPES


def ses_event(
    event_type: str,
    *,
    message_id: str,
    tags: Mapping[str, str] | None = None,
    configuration_set: str = "safe-effects",
    detail: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A minimal SES event-publishing record: ``eventType``, the ``mail`` object with its tags, and the
    event type's own object (``bounce``, ``reject`` ...), ``detail`` when given."""
    all_tags = {"ses:configuration-set": [configuration_set], **{k: [v] for k, v in (tags or {}).items()}}
    event: dict[str, Any] = {
        "eventType": event_type,
        "mail": {
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "source": "sender@example.com",
            "messageId": message_id,
            "destination": ["recipient@example.com"],
            "tags": all_tags,
        },
    }
    detail_key = {"Rendering Failure": "failure"}.get(event_type, event_type[:1].lower() + event_type[1:])
    default = {"reason": "Bad content"} if event_type == "Reject" else {}
    event[detail_key] = dict(detail) if detail is not None else default
    return event


def intent_tags(provider_key: str, tenant_tag_value: str) -> dict[str, str]:
    """The two tags ses_safe writes, for building an event that matches a ledger record."""
    return {INTENT_TAG: provider_key, TENANT_TAG: tenant_tag_value}


def sns_envelope(event: Mapping[str, Any], *, topic_arn: str = "arn:aws:sns:us-east-1:123456789012:ses") -> str:
    """The SNS notification JSON an SQS subscription receives (raw delivery off) around an SES event."""
    return json.dumps(
        {
            "Type": "Notification",
            "MessageId": str(uuid.uuid4()),
            "TopicArn": topic_arn,
            "Message": json.dumps(event),
            "Timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "SignatureVersion": "1",
        }
    )


def eventbridge_event(
    event: Mapping[str, Any], *, account: str = "123456789012", region: str = "us-east-1", with_event_type: bool = True
) -> str:
    """The JSON an SQS target of an EventBridge rule receives for an SES event destination: the event as
    ``detail``, named by ``detail-type``; ``with_event_type=False`` leaves ``eventType`` out of the detail, as
    some documented examples show it."""
    detail_type = next(name for name, kind in SENDING_DETAIL_TYPES.items() if kind == event["eventType"])
    detail = dict(event) if with_event_type else {k: v for k, v in event.items() if k != "eventType"}
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": "aws.ses",
            "account": account,
            "time": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "region": region,
            "resources": [],
            "detail": detail,
        }
    )
