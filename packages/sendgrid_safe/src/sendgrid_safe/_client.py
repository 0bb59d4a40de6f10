"""SDK plumbing: one fresh python-http-client per call, so stored headers and timeouts never leak between calls."""

from __future__ import annotations

from collections.abc import Mapping
from http.client import HTTPMessage
from typing import Any, Protocol

import python_http_client
import sendgrid

from safe_effects import request_digest


class SendResponse(Protocol):
    """What :meth:`SendGridAPIClient.send` returns: the SDK's ``Response`` for a call that was sent, or a
    :class:`LedgerResponse` for an answer taken from the ledger; ``from_ledger`` says which."""

    @property
    def status_code(self) -> int: ...
    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> HTTPMessage: ...
    @property
    def to_dict(self) -> Any: ...
    @property
    def from_ledger(self) -> bool: ...


class LedgerResponse:
    """The shape of the SDK's ``Response`` for an answer taken from the ledger: no provider call was made."""

    from_ledger = True

    def __init__(self, message_id: str | None) -> None:
        self.status_code = 202
        self.body = b""
        self.headers = HTTPMessage()
        if message_id is not None:
            self.headers["X-Message-Id"] = message_id

    @property
    def to_dict(self) -> None:
        """Like the SDK's Response for SendGrid's empty 202 body."""
        return None

    def __repr__(self) -> str:
        return f"LedgerResponse(status_code=202, x_message_id={self.headers.get('X-Message-Id')!r})"


def _fresh_client(sdk: sendgrid.SendGridAPIClient) -> Any:
    """A private client with a copy of the SDK's default headers: per-call header merging cannot leak."""
    headers = dict(sdk._default_headers)  # a property that builds a new dict from api key and subuser
    headers["Content-Type"] = "application/json"
    return python_http_client.Client(host=sdk.host, request_headers=headers, version=3)


def post_mail_send(sdk: sendgrid.SendGridAPIClient, body: Mapping[str, Any], timeout: float) -> Any:
    """POST /v3/mail/send exactly once; python-http-client raises on any non-2xx status."""
    return _fresh_client(sdk).mail.send.post(request_body=dict(body), timeout=timeout)


def get_messages(sdk: sendgrid.SendGridAPIClient, query: str, timeout: float, limit: int = 10) -> Any:
    """GET /v3/messages?query=... (Email Activity API) and return the decoded JSON."""
    response = _fresh_client(sdk).messages.get(query_params={"query": query, "limit": limit}, timeout=timeout)
    return response.to_dict


def x_message_id(response: Any) -> str | None:
    """The X-Message-Id response header (case-insensitive), SendGrid's id for the accepted request."""
    headers = getattr(response, "headers", None)
    value = headers.get("X-Message-Id") if headers is not None else None
    return str(value) if value else None


def digest_response(response: Any) -> str:
    """A digest of what SendGrid answered: status, message id and body (empty on a 202)."""
    body = getattr(response, "body", b"") or b""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    return request_digest(
        {"status": getattr(response, "status_code", None), "message_id": x_message_id(response), "body": text}
    )
