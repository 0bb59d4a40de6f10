"""``sg.client`` of the wrapped client: the SDK's HTTP client, refusing the one call it would send unguarded.

``sg.client.mail.send.post(request_body=...)`` is the SDK's other way to send mail. It takes no intent key,
so through the plain client every retry sends another email and the ledger never hears of it. The wrapper's
``client`` carries the SDK client's state (host, headers, version, timeout) in a subclass of python-http-client's
``Client`` (nothing global is patched) that refuses a POST to ``mail/send`` before a connection is opened, whatever
spelling built the path (``.mail.send``, ``._("mail")._("send")``, ``._("mail/send")``). Reads and the other
endpoints go through unchanged.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit
from urllib.request import OpenerDirector, Request

import python_http_client
import sendgrid

from safe_effects import MissingIntentKey

_MAIL_SEND_PATH = "/mail/send"


class GuardedHTTPClient(python_http_client.Client):  # type: ignore[misc]  # python-http-client is untyped
    """A ``python_http_client.Client`` whose every path segment is guarded too, refusing a mail send."""

    def _build_client(self, name: str | None = None) -> GuardedHTTPClient:
        return _guarded(super()._build_client(name))  # the SDK builds each segment as a plain Client

    def _make_request(self, opener: OpenerDirector, request: Request, timeout: float | None = None) -> Any:
        """Where python-http-client opens the connection: the request is complete here, nothing sent yet."""
        if request.get_method() == "POST" and urlsplit(request.full_url).path.rstrip("/").endswith(_MAIL_SEND_PATH):
            raise MissingIntentKey(
                "a mail send through sg.client (POST mail/send) is not guarded by the ledger: it takes no intent "
                "key, so each retry would send another email. Use sg.send(message, intent_key='object:id:action:v1') "
                "(the dict from Mail(...).get() works too); nothing was sent"
            )
        return super()._make_request(opener, request, timeout)


def _guarded(client: python_http_client.Client) -> GuardedHTTPClient:
    """``client`` with its state as is (the headers dict stays shared, as between the SDK's own segments)."""
    guarded: GuardedHTTPClient = GuardedHTTPClient.__new__(GuardedHTTPClient)
    guarded.__dict__.update(client.__dict__)
    return guarded


def guarded_client(sdk: sendgrid.SendGridAPIClient) -> Any:
    """``sdk.client``, guarded once; guarded again when the SDK built a new one (``set_sendgrid_data_residency``).
    Anything else put there (a test's stub) is left as it is."""
    if isinstance(sdk.client, python_http_client.Client) and not isinstance(sdk.client, GuardedHTTPClient):
        sdk.client = _guarded(sdk.client)
    return sdk.client
