"""SendGrid's rules as data and small functions: the contract, the classifier, custom-arg stamping, events.

Nothing here talks to the network (moto's split): ``_client.py`` holds the SDK plumbing.
"""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.error
from collections.abc import Mapping
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from python_http_client import exceptions as phc

from safe_effects import (
    ConcurrentSameKey,
    EvidenceVerdict,
    IdempotencyContract,
    InvalidInput,
    LookupKind,
    LookupMethod,
    Outcome,
    ProviderContract,
    Verdict,
)

PROVIDER = "sendgrid"
OPERATION = "mail.send"
DEFAULT_TIMEOUT = 10.0  # seconds; the SDK's own default is None, which blocks forever

# custom_args the wrapper writes; events echo them as top-level fields
INTENT_ARG = "safe_effects_intent"
TENANT_ARG = "safe_effects_tenant"
RECIPIENTS_ARG = "safe_effects_rcpt"
RESERVED_PREFIX = "safe_effects_"
CUSTOM_ARGS_LIMIT = 10_000  # bytes, all custom_args of a message together
MAX_PERSONALIZATIONS = 1000  # per request (Mail Send's limits); more is a 400

SOURCES = (
    "https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send",
    "https://www.twilio.com/docs/sendgrid/for-developers/sending-email/custom-arguments",
    "https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event",
    "https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features",
    "https://www.twilio.com/docs/sendgrid/api-reference/email-activity/filter-all-messages",
    "https://www.twilio.com/docs/sendgrid/for-developers/sending-email/getting-started-email-activity-api",
    "https://support.sendgrid.com/hc/en-us/articles/35804743679259-How-To-Filter-results-with-Activity-Feed-API-for-X-Message-ID",
    "https://github.com/sendgrid/python-http-client/blob/main/python_http_client/exceptions.py",
)

EVENT_WEBHOOK = LookupMethod(
    kind=LookupKind.EVENT_STREAM,
    description="Event Webhook: processed/deferred/delivered/bounce/dropped events carry the custom_args "
    "(safe_effects_intent, safe_effects_tenant) as top-level fields; ingest with sendgrid_safe.ingest_events",
    lag=timedelta(minutes=5),
    requires="Event Webhook enabled for processed, delivered, deferred, bounce and dropped (signed: recommended)",
    proves_absence=False,
    verified=False,
)
ACTIVITY_SEARCH = LookupMethod(
    kind=LookupKind.SEARCH,
    description="Email Activity API GET /v3/messages?query=unique_args['safe_effects_intent']=\"...\" AND "
    "unique_args['safe_effects_tenant']=\"...\"",
    rate_limit_per_minute=6,
    requires="the paid additional email activity history add-on and an API key with Email Activity access",
    proves_absence=False,
    verified=False,
)

CONTRACT = ProviderContract(
    provider=PROVIDER,
    operation=OPERATION,
    idempotency=IdempotencyContract(supported=False, concurrent_same_key=ConcurrentSameKey.DUPLICATES),
    lookups=(EVENT_WEBHOOK, ACTIVITY_SEARCH),
    normal_response_window=timedelta(seconds=10),
    redispatch_when_proven_absent=False,
    forced_sdk_settings={
        "client.timeout": f"explicit, {DEFAULT_TIMEOUT:g}s unless given (SDK default: none, blocks forever)",
        "retries": "none: python-http-client never retries",
        "request_headers": "never passed per call (python-http-client merges them into the stored headers)",
    },
    sources=SOURCES,
    unverified=(
        "Email Activity query syntax unique_args['k']=\"v\" for custom_args",
        "Email Activity indexing lag after a 202",
        "a dropped message gets no processed event",
        "sg_message_id starts with the X-Message-Id of the request",
        "batch + scheduled-send cancel would make an unknown definitive (untested idea, not used)",
    ),
)

# raised by http.client after the request left the socket: the server may have acted
_AFTER_SEND = (TimeoutError, ConnectionResetError, http.client.HTTPException)


class UnexpectedAnswer(Exception):
    """A success status that is not Mail Send's: SendGrid answers 202 with an X-Message-Id (200, without one,
    only in sandbox mode). Another answer came from something else at the configured host (a wrong host, a
    proxy, a captive portal whose redirect urllib followed as a GET), and the message may or may not be with
    SendGrid: unknown, never confirmed with no id to find it by."""


def check_accepted(status: object, message_id: str | None, body: Mapping[str, Any]) -> None:
    """Raise :class:`UnexpectedAnswer` unless ``status`` and ``message_id`` are Mail Send's answer to ``body``."""
    if status == 202 and message_id is not None:
        return
    if status == 200 and sandboxed(body):
        return
    has = "with" if message_id is not None else "without"
    raise UnexpectedAnswer(
        f"the Mail Send host answered HTTP {status} {has} an X-Message-Id, where SendGrid answers 202 with one "
        "(200 only in sandbox mode): something else may have answered (a wrong host, a proxy, a captive portal), "
        "and SendGrid may or may not have the message"
    )


def sandboxed(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` asks for sandbox mode: SendGrid validates it and sends nothing."""
    settings = body.get("mail_settings")
    sandbox = settings.get("sandbox_mode") if isinstance(settings, Mapping) else None
    return isinstance(sandbox, Mapping) and sandbox.get("enable") is True


def classify(error: BaseException) -> Verdict:
    """Definitive only where the request provably did not take effect; everything else is unknown."""
    if isinstance(error, phc.HTTPError):
        # 401 the API key, 403 a scope or an unverified sender identity: SendGrid considered no message, so the
        # intent waits for the account to be fixed; 429/408 retryable after SendGrid's hint; any other 4xx
        # refused the message; 5xx unknown
        status = getattr(error, "status_code", None)
        return Verdict.of_status(error, status, f"http_{status}", retry_after=retry_after(error.headers))
    if isinstance(error, urllib.error.URLError):
        return _url_error(error)
    if isinstance(error, ConnectionRefusedError):
        return Verdict.of(error, Outcome.RETRYABLE, "connection_refused")
    if isinstance(error, _AFTER_SEND):
        return Verdict.of(error, Outcome.UNKNOWN, "after_send")
    if isinstance(error, UnexpectedAnswer):
        return Verdict.of(error, Outcome.UNKNOWN, "unexpected_answer")
    return Verdict.of(error, Outcome.UNKNOWN, "unrecognised")


def _url_error(error: urllib.error.URLError) -> Verdict:
    """urllib wraps only failures of connect/send: the request never fully reached the server."""
    reason = error.reason
    if isinstance(reason, ssl.SSLCertVerificationError):
        return Verdict.of(error, Outcome.FINAL, "tls_verify_failed")
    if isinstance(reason, OSError):
        return Verdict.of(error, Outcome.RETRYABLE, f"connect:{type(reason).__name__}")
    return Verdict.of(error, Outcome.FINAL, "bad_url")  # "unknown url type", "no host given"


def retry_after(headers: Any) -> float | None:
    """Seconds to wait from Retry-After (seconds or HTTP date), else from X-RateLimit-Reset (epoch)."""
    if headers is None:
        return None
    value = headers.get("Retry-After")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    reset = headers.get("X-RateLimit-Reset")
    try:
        return None if reset is None else max(0.0, float(reset) - time.time())
    except ValueError:
        return None


def message_body(message: Any) -> dict[str, Any]:
    """The Mail Send body the SDK would post: a dict as is, a ``Mail`` through ``.get()``.

    The type is checked before ``.get()`` is called, so a str, bytes or None is InvalidInput, not AttributeError.
    """
    if isinstance(message, dict):
        return message
    get = getattr(message, "get", None)
    body = get() if callable(get) else None
    if not isinstance(body, dict):
        raise InvalidInput(f"a SendGrid message must be a Mail or a dict, got {type(message).__name__}")
    return body


def check_unstamped(body: Mapping[str, Any]) -> None:
    """Refuse a message that already carries our custom_args: they would override or fake the intent."""
    scopes = [body.get("custom_args") or {}] + [
        p.get("custom_args") or {} for p in body.get("personalizations") or [] if isinstance(p, dict)
    ]
    for scope in scopes:
        if not isinstance(scope, Mapping):
            raise InvalidInput(f"custom_args must be an object of string values, got {type(scope).__name__}")
        taken = sorted(k for k in scope if isinstance(k, str) and k.startswith(RESERVED_PREFIX))
        if taken:
            raise InvalidInput(f"custom_args {taken} are reserved for sendgrid_safe; rename them")


def recipient_count(body: Mapping[str, Any]) -> int:
    """to + cc + bcc over all personalizations: a drop settles the intent only for a single recipient."""
    count = 0
    for personalization in body.get("personalizations") or []:
        if isinstance(personalization, dict):
            count += sum(len(personalization.get(field) or []) for field in ("to", "cc", "bcc"))
    return count


def split_provider_key(provider_key: str) -> tuple[str, str]:
    """``tenant:intent_key`` back into its parts (a tenant never contains ``:``)."""
    tenant, _, intent_key = provider_key.partition(":")
    return tenant, intent_key


def stamp(body: Mapping[str, Any], provider_key: str) -> dict[str, Any]:
    """A copy of ``body`` whose message-level custom_args name the intent; the caller's dict is untouched.
    What SendGrid would refuse for its size (custom_args, personalizations) is refused here, before the ledger
    records the send: refused by SendGrid, the intent would end rejected and the corrected send need a new key."""
    check_unstamped(body)
    personalizations = body.get("personalizations")
    if isinstance(personalizations, list) and len(personalizations) > MAX_PERSONALIZATIONS:
        raise InvalidInput(
            f"{len(personalizations)} personalizations; SendGrid takes at most {MAX_PERSONALIZATIONS} per request: "
            "split the send into several intents"
        )
    tenant, intent_key = split_provider_key(provider_key)
    custom_args = {
        **(body.get("custom_args") or {}),
        INTENT_ARG: intent_key,
        TENANT_ARG: tenant,
        RECIPIENTS_ARG: str(recipient_count(body)),
    }
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in custom_args.items())
    if size > CUSTOM_ARGS_LIMIT:
        raise InvalidInput(f"custom_args would be {size} bytes with the intent; SendGrid allows 10,000")
    return {**body, "custom_args": custom_args}


def activity_query(tenant: str, intent_key: str) -> str:
    """The Email Activity query for one intent (syntax per SendGrid's docs, unverified for custom_args)."""
    return f"unique_args['{INTENT_ARG}']=\"{intent_key}\" AND unique_args['{TENANT_ARG}']=\"{tenant}\""


def message_id_of(sg_message_id: str) -> str:
    """The request's X-Message-Id from a per-recipient sg_message_id (``<x-message-id>.filter...``)."""
    head, sep, _ = sg_message_id.partition(".filter")
    return head if sep else sg_message_id.partition(".")[0]


CONFIRMING_EVENTS = frozenset({"deferred", "delivered", "bounce"})  # SendGrid tried to deliver: the mail went out


def event_verdict(event: Mapping[str, Any]) -> EvidenceVerdict:
    """Delivery events prove the mail went out; ``processed`` only that SendGrid took it (a drop may still
    follow, see the contract's rejection_window); a drop rejects only a single-recipient message."""
    kind = event.get("event")
    if kind in CONFIRMING_EVENTS:
        return EvidenceVerdict.CONFIRMS
    if kind == "processed":
        return EvidenceVerdict.ACCEPTS
    if kind == "dropped" and event.get(RECIPIENTS_ARG) == "1":
        return EvidenceVerdict.REJECTS
    return EvidenceVerdict.INFORMATIONAL
