"""Stripe SDK exception → Verdict: definitive (nothing happened) or unknown (it may have happened).

Transport errors are read from the ``__cause__``/``__context__`` chain the SDK's RequestsClient builds
(APIConnectionError ← requests ← urllib3 ← socket): refused or timed out while connecting means the
request never left; a read timeout or a dropped connection after sending means it may have run.
"""

from __future__ import annotations

from collections.abc import Iterator

import requests
import stripe
import urllib3.exceptions
from stripe.oauth_error import OAuthError

from safe_effects import Outcome, Verdict

from ._contract import KEY_HELD_BY_ANOTHER_REQUEST

_FINAL = (
    stripe.CardError,
    stripe.InvalidRequestError,
    OAuthError,  # /oauth/token and /oauth/deauthorize refused (invalid_grant, invalid_client...): nothing done
)
# The API key itself refused (401: wrong, expired or revoked; 403: a restricted key without this permission):
# Stripe considered no request, so the intent waits for a fixed key instead of ending rejected.
_CREDENTIALS = (stripe.AuthenticationError, stripe.PermissionError)
# The statuses of a refusal Stripe answered with a typed error body: the request was refused, nothing done. v2's
# own classes (InsufficientFundsError, AlreadyCanceledError, NotCancelableError...) subclass StripeError directly.
# Not 409 (a key still executing), 429 (rate limited: retryable) or 5xx (it may have run).
_REFUSED_STATUSES = frozenset({400, 402, 403, 404})
# Any of these in the chain means bytes may have reached Stripe: never treat as "not sent".
_AFTER_SEND = (
    requests.exceptions.ReadTimeout,
    urllib3.exceptions.ReadTimeoutError,
    urllib3.exceptions.ProtocolError,
    ConnectionResetError,
)
# Raised before a connection existed, so no request can have been sent.
_BEFORE_SEND = (
    requests.exceptions.ConnectTimeout,
    urllib3.exceptions.ConnectTimeoutError,  # NewConnectionError and NameResolutionError inherit from it
    ConnectionRefusedError,
)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error and everything it wraps: causes, contexts, urllib3's ``reason`` and exception args."""
    seen: set[int] = set()
    stack = [error]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        wrapped = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        stack.extend(w for w in wrapped if isinstance(w, BaseException))


def _retry_after(error: stripe.StripeError) -> float | None:
    """Seconds from a Retry-After header, when Stripe sent a numeric one."""
    value = (error.headers or {}).get("Retry-After") or (error.headers or {}).get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def error_code(error: stripe.StripeError) -> str | None:
    """The API error code (``card_declined``, ``idempotency_key_in_use``); APIError keeps it only in .error."""
    return error.code or (error.error.code if error.error is not None else None)


def _declined_object(error: stripe.StripeError) -> str | None:
    """What a declined card still created: the PaymentIntent (``error.payment_intent``), else the failed
    charge of a ``charges.create`` (``error.charge``). An OAuth error's object has neither field."""
    if error.error is None or isinstance(error, OAuthError):
        return None
    intent = error.error.payment_intent
    return intent.id if intent is not None else error.error.charge


def _refused(error: stripe.StripeError) -> bool:
    """A typed refusal: a 400/402/403/404 the SDK parsed into an error class of its own (not the APIError it
    raises for an answer it could not read)."""
    return not isinstance(error, stripe.APIError | stripe.APIConnectionError) and error.http_status in _REFUSED_STATUSES


def _connection(error: stripe.APIConnectionError) -> Verdict:
    """Refused or connect-timeout → retryable (never sent); anything after sending, or unrecognised → unknown."""
    chain = list(_chain(error))
    if any(isinstance(e, _AFTER_SEND) for e in chain):
        return Verdict.of(error, Outcome.UNKNOWN, "after_send")
    before = next((e for e in chain if isinstance(e, _BEFORE_SEND)), None)
    if before is not None:
        return Verdict.of(error, Outcome.RETRYABLE, f"before_send:{type(before).__name__}")
    return Verdict.of(error, Outcome.UNKNOWN, "transport")


def classify(error: BaseException) -> Verdict:
    """The verdict for one exception from a Stripe write; unrecognised means unknown, never definitive."""
    if isinstance(error, stripe.RateLimitError):  # 429: rate limiting runs before the endpoint executes
        return Verdict.of(error, Outcome.RETRYABLE, error_code(error) or "rate_limit", retry_after=_retry_after(error))
    if isinstance(error, stripe.StripeError) and error.http_status == 409:
        # a request under the same key (or on the same object) still runs; v2 types "key in use" as an
        # IdempotencyError, which is final only as a 400 (the key reused with other params)
        return Verdict.of(error, Outcome.UNKNOWN, error_code(error) or "http_409")
    if isinstance(error, stripe.IdempotencyError):
        # a 400: the key already holds a request with other params, one this ledger did not make (it sends one
        # key with one body): the raw SDK before adoption, or another version of this wrapper. That request
        # may have acted, so not "rejected"; and its key may expire at any time, so never replayed
        return Verdict.of(error, Outcome.UNKNOWN, KEY_HELD_BY_ANOTHER_REQUEST)
    if isinstance(error, _CREDENTIALS):
        return Verdict.credentials_refused(error, error_code(error))
    if isinstance(error, _FINAL) or (isinstance(error, stripe.StripeError) and _refused(error)):
        return Verdict.of(error, Outcome.FINAL, error_code(error), provider_result_id=_declined_object(error))
    if isinstance(error, stripe.APIConnectionError):
        return _connection(error)
    if isinstance(error, stripe.StripeError):  # APIError: 409 key in use, 5xx, unparseable answers
        return Verdict.of(error, Outcome.UNKNOWN, error_code(error) or f"http_{error.http_status}")
    return Verdict.of(error, Outcome.UNKNOWN, "unrecognised")
