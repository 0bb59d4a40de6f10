"""The classifier table: definitive only when nothing can have been queued; everything else unknown."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ProxyConnectionError,
    ReadTimeoutError,
    ResponseStreamingError,
    SSLError,
    TokenRetrievalError,
    UnauthorizedSSOTokenError,
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
RETRYABLE = [
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "ThrottledException",
    "RequestThrottledException",
    "RequestThrottled",
    "RequestLimitExceeded",
    "SlowDown",
]
CREDENTIALS = [
    "AccessDenied",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
    "InvalidSignatureException",
    "RequestExpired",
    "RequestTimeTooSkewed",
]
UNKNOWN = [("InternalFailure", 500), ("ServiceUnavailable", 503), ("SomethingNew", 500), ("", 502)]
# v1's answers to a malformed request (an address without a domain, a tag with a character SES refuses), and
# any 4xx SES may add: a refusal of the request, nothing queued
OTHER_REFUSALS = [
    ("InvalidParameterValue", 400),
    ("ValidationError", 400),
    ("MissingParameter", 400),
    ("InvalidParameterCombination", 400),
    ("SomethingNew", 400),
    ("", 413),
]


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "SendEmail"
    )


@pytest.mark.parametrize("code", FINAL)
def test_refusals_are_final(code: str) -> None:
    verdict = classify(client_error(code))
    assert (verdict.outcome, verdict.error_code) == (Outcome.FINAL, code)


@pytest.mark.parametrize("status", [400, 403])
@pytest.mark.parametrize("code", CREDENTIALS)
def test_refused_credentials_defer_the_send_not_reject_it(code: str, status: int) -> None:
    """A rotated key or an expired token: nothing reached SES's send logic, and the same send should go once
    the credentials are fixed, so it is retryable with a hint that defers the call. Decided by the code, not the
    status: SES's API reference (Common Errors) answers AccessDeniedException, IncompleteSignature and
    RequestExpired with a 400, which by its status alone would end the send rejected for good."""
    verdict = classify(client_error(code, status))
    assert (verdict.outcome, verdict.error_code, verdict.retry_after) == (Outcome.RETRYABLE, code, 60.0)


@pytest.mark.parametrize("status", [400, 429, 503])
@pytest.mark.parametrize("code", RETRYABLE)
def test_rate_and_quota_refusals_are_retryable_whatever_their_status(code: str, status: int) -> None:
    """Decided by the code: v2's ThrottlingException is a 400 (by its status a refusal), and a gateway may answer
    a throttling code botocore knows with a 503 (by its status unknown: a send never made, then never settled)."""
    verdict = classify(client_error(code, status))
    assert (verdict.outcome, verdict.error_code) == (Outcome.RETRYABLE, code)


@pytest.mark.parametrize(("code", "status"), OTHER_REFUSALS)
def test_any_other_client_error_status_is_a_final_refusal(code: str, status: int) -> None:
    verdict = classify(client_error(code, status))
    assert (verdict.outcome, verdict.error_code) == (Outcome.FINAL, code or None)


@pytest.mark.parametrize(("code", "status"), [("ExpiredTokenException", 403), ("OptInRequired", 403), ("", 401)])
def test_an_auth_refusal_under_an_unlisted_code_defers_the_send(code: str, status: int) -> None:
    verdict = classify(client_error(code, status))
    assert (verdict.outcome, verdict.retry_after) == (Outcome.RETRYABLE, 60.0)


@pytest.mark.parametrize("status", [408, 429])
def test_not_now_statuses_with_an_unlisted_code_are_retryable(status: int) -> None:
    verdict = classify(client_error("SlowDown", status))
    assert (verdict.outcome, verdict.retry_after) == (Outcome.RETRYABLE, None)


@pytest.mark.parametrize(
    "error",
    [
        NoCredentialsError(),
        PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"),
        CredentialRetrievalError(provider="container-role", error_msg="metadata endpoint timed out"),
        TokenRetrievalError(provider="sso", error_msg="expired"),
        UnauthorizedSSOTokenError(),
    ],
    ids=lambda error: type(error).__name__,
)
def test_credentials_that_cannot_be_had_defer_the_send(error: Exception) -> None:
    """boto3 resolves credentials while signing, before any request: an instance-metadata timeout or an expired
    SSO token sends nothing, and the same send should go once credentials are back."""
    verdict = classify(error)
    assert (verdict.outcome, verdict.retry_after, verdict.error_class) == (
        Outcome.RETRYABLE, 60.0, type(error).__qualname__,
    )  # fmt: skip


@pytest.mark.parametrize(("code", "status"), UNKNOWN)
def test_server_errors_and_unrecognised_codes_are_unknown(code: str, status: int) -> None:
    assert classify(client_error(code, status)).outcome is Outcome.UNKNOWN


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ParamValidationError(report="bad"), Outcome.FINAL),
        (EndpointConnectionError(endpoint_url="http://x"), Outcome.RETRYABLE),
        (ConnectTimeoutError(endpoint_url="http://x"), Outcome.RETRYABLE),
        (ProxyConnectionError(proxy_url="http://p"), Outcome.RETRYABLE),
        (ReadTimeoutError(endpoint_url="http://x"), Outcome.UNKNOWN),
        (ConnectionClosedError(endpoint_url="http://x"), Outcome.UNKNOWN),
        (HTTPClientError(error="reset"), Outcome.UNKNOWN),
        (ResponseStreamingError(error="cut"), Outcome.UNKNOWN),
        (SSLError(endpoint_url="https://x", error="handshake"), Outcome.UNKNOWN),  # may come after the request
        (RuntimeError("anything else"), Outcome.UNKNOWN),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_client_side_and_transport_errors(error: Exception, outcome: Outcome) -> None:
    verdict = classify(error)
    assert verdict.outcome is outcome
    assert verdict.error_class == type(error).__qualname__
