"""Which SES/botocore errors prove nothing was sent, and which leave the send in doubt."""

from __future__ import annotations

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoAuthTokenError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ProxyConnectionError,
    RefreshWithMFAUnsupportedError,
    SSOError,
    TokenRetrievalError,
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
        "InvalidSignatureException",  # the JSON APIs' (sesv2) SignatureDoesNotMatch
        "RequestExpired",  # the signature's time is too far from AWS's: a skewed clock, fixed by fixing it
        "RequestTimeTooSkewed",
    }
)
# Rate or daily quota exceeded: SES drops the request, the same send may go again later. SES's guide names
# Throttling (v1) and ThrottlingException (v2, a 400: by its status alone it would end the send rejected, for
# good); the rest are the throttling codes botocore's own retry logic knows, any of which a gateway may answer.
RETRYABLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "ThrottledException",
        "RequestThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "SlowDown",
    }
)
# Raised while boto3 resolves credentials to sign with (no credentials, an instance-metadata or container
# endpoint timing out, an expired SSO token): before any request, so the send goes once they are back.
CREDENTIAL_ERRORS = (
    NoCredentialsError,
    PartialCredentialsError,
    CredentialRetrievalError,
    TokenRetrievalError,
    SSOError,
    NoAuthTokenError,
    RefreshWithMFAUnsupportedError,
)
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
        # any other code by its status: a 4xx refused the request as sent (v1 answers a malformed address or
        # tag with InvalidParameterValue, 400) and no event will ever come to settle it; a 401/403 under an
        # unlisted code (ExpiredTokenException, OptInRequired) is an auth refusal; 5xx or none stays unknown
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return Verdict.of_status(error, status, code or None)
    if isinstance(error, CREDENTIAL_ERRORS):  # boto3 had nothing to sign with: nothing was sent
        return Verdict.credentials_refused(error)
    if isinstance(error, CLIENT_SIDE_ERRORS):
        return Verdict.of(error, Outcome.FINAL)
    if isinstance(error, PRE_SEND_ERRORS):
        return Verdict.of(error, Outcome.RETRYABLE)
    # ReadTimeoutError, ConnectionClosedError, HTTPClientError, ResponseStreamingError, 5xx, the rest.
    return Verdict.of(error, Outcome.UNKNOWN)
