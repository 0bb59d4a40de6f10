"""Checked facts about SES sends, as data: no idempotency, so reconciliation leans on published events."""

from __future__ import annotations

from datetime import timedelta

from safe_effects import (
    ConcurrentSameKey,
    IdempotencyContract,
    LookupKind,
    LookupMethod,
    ParameterMatching,
    ProviderContract,
)

PROVIDER = "ses"
SEND_OPERATIONS = ("ses.send_email", "ses.send_raw_email", "ses.send_templated_email", "sesv2.send_email")
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0

SOURCES = (
    "https://docs.aws.amazon.com/ses/latest/APIReference/API_SendEmail.html",
    "https://docs.aws.amazon.com/ses/latest/APIReference/API_SendRawEmail.html",
    "https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_SendEmail.html",
    "https://docs.aws.amazon.com/ses/latest/APIReference/API_MessageTag.html",
    "https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_GetMessageInsights.html",
    "https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-sns-contents.html",
    "https://docs.aws.amazon.com/ses/latest/APIReference/CommonErrors.html",
    "https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html",
)

EVENT_STREAM = LookupMethod(
    kind=LookupKind.EVENT_STREAM,
    description="SES event publishing (SNS/SQS): Send, Delivery, Reject, Rendering Failure events carry "
    "mail.messageId and mail.tags, whose safe-effects-intent tag names the intent",
    lag=timedelta(minutes=5),
    requires="a configuration set with an event destination publishing Send, Reject and Rendering Failure",
    proves_absence=False,
)
MESSAGE_INSIGHTS = LookupMethod(
    kind=LookupKind.RETRIEVE,
    description="sesv2 get_message_insights(MessageId): only for records that already hold a MessageId",
    rate_limit_per_minute=60,
    requires="the MessageId",
    proves_absence=False,
    verified=False,
)


def send_contract(operation: str) -> ProviderContract:
    """The contract of one SES send operation; they all behave alike."""
    return ProviderContract(
        provider=PROVIDER,
        operation=operation,
        idempotency=IdempotencyContract(
            supported=False,
            max_key_length=256,
            key_charset=r"[A-Za-z0-9_-]{1,256}",
            parameter_matching=ParameterMatching.NONE,
            concurrent_same_key=ConcurrentSameKey.DUPLICATES,
        ),
        lookups=(EVENT_STREAM, MESSAGE_INSIGHTS),
        normal_response_window=timedelta(seconds=30),
        redispatch_when_proven_absent=False,
        forced_sdk_settings={
            "retries.total_max_attempts": "1",
            "retries.mode": "standard",
            "connect_timeout": f"{CONNECT_TIMEOUT:g}s (overridable)",
            "read_timeout": f"{READ_TIMEOUT:g}s (overridable)",
        },
        sources=SOURCES,
        unverified=(
            "get_message_insights against real SES (moto does not implement it)",
            "event lag: SES documents no bound; 5 minutes is our assumption for alerting",
            "real SES tag handling and event publishing (moto stores neither tags nor configuration sets)",
        ),
    )


CONTRACTS = {operation: send_contract(operation) for operation in SEND_OPERATIONS}
