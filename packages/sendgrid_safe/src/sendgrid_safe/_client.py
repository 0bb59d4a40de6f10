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


def _fresh_client(sdk: sendgrid.SendGridAPIClient, current: python_http_client.Client) -> Any:
    """A private client at ``current``'s address (host, version, path) with a copy of the SDK's default headers:
    per-call header merging into a shared client cannot leak into it."""
    headers = dict(sdk._default_headers)  # a property that builds a new dict from api key and subuser
    headers["Content-Type"] = "application/json"
    return python_http_client.Client(
        host=current.host,
        request_headers=headers,
        version=current._version,
        url_path=list(current._url_path),
        append_slash=current.append_slash,
    )


def post_mail_send(sdk: sendgrid.SendGridAPIClient, body: Mapping[str, Any], timeout: float) -> Any:
    """POST /v3/mail/send exactly once, where the SDK's own send would: through ``sdk.client``'s address, or
    through whatever else was set on ``sdk.client`` (a test's stub), called as the SDK calls it. python-http-client
    raises on any non-2xx status."""
    current = sdk.client
    if not isinstance(current, python_http_client.Client):
        return current.mail.send.post(request_body=dict(body))
    return _fresh_client(sdk, current).mail.send.post(request_body=dict(body), timeout=timeout)


def get_messages(sdk: sendgrid.SendGridAPIClient, query: str, timeout: float, limit: int = 10) -> Any:
    """GET /v3/messages?query=... (Email Activity API) through the same client as a send, the decoded JSON."""
    current, params = sdk.client, {"query": query, "limit": limit}
    if not isinstance(current, python_http_client.Client):
        return current.messages.get(query_params=params).to_dict
    return _fresh_client(sdk, current).messages.get(query_params=params, timeout=timeout).to_dict


def x_message_id(response: Any) -> str | None:
    """The X-Message-Id response header (case-insensitive), SendGrid's id for the accepted request."""
    headers = getattr(response, "headers", None)
    value = headers.get("X-Message-Id") if headers is not None else None
    return value if isinstance(value, str) and value else None  # a stub's answer may hold anything


def digest_response(response: Any) -> str:
    """A digest of what SendGrid answered: status, message id and body (empty on a 202)."""
    body = getattr(response, "body", b"")
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body if isinstance(body, str) else ""
    status = getattr(response, "status_code", None)
    status = status if isinstance(status, int) else None  # a stub's answer: its digest must not fail
    return request_digest({"status": status, "message_id": x_message_id(response), "body": text})
