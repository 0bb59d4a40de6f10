"""The classifier table: definitive only when nothing can have been queued; everything else unknown."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    ProxyConnectionError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from safe_effects import Outcome
from ses_safe import classify

FINAL = [
    "MessageRejected",
    "MailFromDomainNotVerifiedException",
    "ConfigurationSetDoesNotExist",
    "ConfigurationSetSendingPausedException",
    "AccountSendingPausedException",
    "TemplateDoesNotExist",
    "SendingPausedException",
    "AccountSuspendedException",
    "BadRequestException",
    "NotFoundException",
    "LimitExceededException",
]
RETRYABLE = ["Throttling", "TooManyRequestsException"]
CREDENTIALS = [
    "AccessDenied",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
]
UNKNOWN = [("InternalFailure", 500), ("ServiceUnavailable", 503), ("SomethingNew", 400), ("", 500)]


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "SendEmail"
    )


@pytest.mark.parametrize("code", FINAL)
def test_refusals_are_final(code: str) -> None:
    verdict = classify(client_error(code))
    assert (verdict.outcome, verdict.error_code) == (Outcome.FINAL, code)


@pytest.mark.parametrize("code", CREDENTIALS)
def test_refused_credentials_defer_the_send_not_reject_it(code: str) -> None:
    """A rotated key or an expired token: nothing reached SES's send logic, and the same send should go once
    the credentials are fixed, so it is retryable with a hint that defers the call."""
    verdict = classify(client_error(code, 403))
    assert (verdict.outcome, verdict.error_code, verdict.retry_after) == (Outcome.RETRYABLE, code, 60.0)


@pytest.mark.parametrize("code", RETRYABLE)
def test_rate_and_quota_refusals_are_retryable(code: str) -> None:
    assert classify(client_error(code, 429)).outcome is Outcome.RETRYABLE


@pytest.mark.parametrize(("code", "status"), UNKNOWN)
def test_server_errors_and_unrecognised_codes_are_unknown(code: str, status: int) -> None:
    assert classify(client_error(code, status)).outcome is Outcome.UNKNOWN


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ParamValidationError(report="bad"), Outcome.FINAL),
        (NoCredentialsError(), Outcome.RETRYABLE),  # boto3 found none to sign with; fixed, the send goes
        (EndpointConnectionError(endpoint_url="http://x"), Outcome.RETRYABLE),
        (ConnectTimeoutError(endpoint_url="http://x"), Outcome.RETRYABLE),
        (ProxyConnectionError(proxy_url="http://p"), Outcome.RETRYABLE),
        (ReadTimeoutError(endpoint_url="http://x"), Outcome.UNKNOWN),
        (ConnectionClosedError(endpoint_url="http://x"), Outcome.UNKNOWN),
        (HTTPClientError(error="reset"), Outcome.UNKNOWN),
        (ResponseStreamingError(error="cut"), Outcome.UNKNOWN),
        (RuntimeError("anything else"), Outcome.UNKNOWN),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_client_side_and_transport_errors(error: Exception, outcome: Outcome) -> None:
    verdict = classify(error)
    assert verdict.outcome is outcome
    assert verdict.error_class == type(error).__qualname__
