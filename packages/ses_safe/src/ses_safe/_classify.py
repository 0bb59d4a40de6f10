"""Which SES/botocore errors prove nothing was sent, and which leave the send in doubt."""

from __future__ import annotations

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ProxyConnectionError,
)

from safe_effects import Outcome, Verdict

# SES refused the request itself: nothing was queued for delivery (v1 and v2 codes).
FINAL_CODES = frozenset(
    {
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
    }
)
# AWS-wide authentication refusals: the request never reached SES's send logic, and the same send should go
# once the credentials are fixed (a rotated key, an expired token), so the intent waits instead of ending rejected.
CREDENTIAL_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "IncompleteSignature",
        "MissingAuthenticationToken",
        "ExpiredToken",
    }
)
# Rate or daily quota exceeded: SES drops the request, the same send may go again later.
RETRYABLE_CODES = frozenset({"Throttling", "TooManyRequestsException"})
# The request was never written to a socket.
PRE_SEND_ERRORS = (ConnectTimeoutError, ProxyConnectionError, EndpointConnectionError)
CLIENT_SIDE_ERRORS = (ParamValidationError,)


def classify(error: BaseException) -> Verdict:
    """Definitive only when SES (or the client, before sending) proves no message was queued."""
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code") or "")
        if code in RETRYABLE_CODES:
            return Verdict.of(error, Outcome.RETRYABLE, code)
        if code in CREDENTIAL_CODES:
            return Verdict.credentials_refused(error, code)
        if code in FINAL_CODES:
            return Verdict.of(error, Outcome.FINAL, code)
        return Verdict.of(error, Outcome.UNKNOWN, code or None)
    if isinstance(error, NoCredentialsError):  # boto3 found none to sign with: nothing was sent
        return Verdict.credentials_refused(error)
    if isinstance(error, CLIENT_SIDE_ERRORS):
        return Verdict.of(error, Outcome.FINAL)
    if isinstance(error, PRE_SEND_ERRORS):
        return Verdict.of(error, Outcome.RETRYABLE)
    # ReadTimeoutError, ConnectionClosedError, HTTPClientError, ResponseStreamingError, 5xx, the rest.
    return Verdict.of(error, Outcome.UNKNOWN)
