"""The drop-in ``SendGridAPIClient``: the SDK's construction and ``send``, guarded by the ledger."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sendgrid

from safe_effects import (
    DEFAULT_TENANT,
    EffectRecord,
    EffectRequest,
    IntentKey,
    InvalidInput,
    Ledger,
    MissingIntentKey,
    check_ledger,
    check_tenant,
)

from . import _rules
from ._adapter import SendGridAdapter
from ._client import LedgerResponse, SendResponse
from ._guard import guarded_client

if TYPE_CHECKING:
    from sendgrid.helpers.mail import Mail


class SendGridAPIClient:
    """``sendgrid.SendGridAPIClient`` whose ``send`` reaches SendGrid at most once per intent key.

    Every other attribute is the wrapped SDK client's. ``client`` is the SDK's HTTP client for the other
    endpoints; a mail send through it (``sg.client.mail.send.post``) is refused: use :meth:`send`.
    """

    def __init__(
        self,
        api_key: str | None = None,
        host: str = "https://api.sendgrid.com",
        impersonate_subuser: str | None = None,
        *,
        ledger: Ledger,
        tenant: str = DEFAULT_TENANT,
        timeout: float = _rules.DEFAULT_TIMEOUT,
        activity_lookup: bool = True,
    ) -> None:
        self.ledger = check_ledger(ledger, "sendgrid_safe.SendGridAPIClient")
        sdk = sendgrid.SendGridAPIClient(api_key=api_key, host=host, impersonate_subuser=impersonate_subuser)
        sdk.client.timeout = timeout  # the SDK default (None) would let a passthrough call hang forever
        guarded_client(sdk)  # at once: the SDK object is reachable (adapter.sdk) before anyone reads .client
        self._sdk, self._timeout = sdk, timeout
        self._replaced: list[Any] = []  # clients set over the SDK's, newest last: a delete restores the one before
        self.tenant = check_tenant(tenant)
        self.adapter = SendGridAdapter(sdk, timeout=timeout, activity_lookup=activity_lookup)

    if TYPE_CHECKING:  # intent_key required; at run time its absence is MissingIntentKey, named

        def send(self, message: Mail | Mapping[str, Any], *, intent_key: IntentKey | str) -> SendResponse: ...

    else:

        def send(self, message: Any, *, intent_key: IntentKey | str | None = None) -> SendResponse:
            return self._send(message, intent_key)

    def _send(self, message: Any, intent_key: IntentKey | str | None) -> SendResponse:
        """Send a ``Mail`` (or its dict) once for ``intent_key``: the SDK's response, or for a repeat the stored
        answer as a LedgerResponse; either says ``.from_ledger`` (whether no provider call was made)."""
        if intent_key is None:
            raise MissingIntentKey("SendGridAPIClient.send needs intent_key=...: SendGrid has no idempotency")
        if self._sdk.impersonate_subuser:
            # SendGrid's docs: "The on-behalf-of header does not work with the Mail Send API". Sent anyway, the
            # mail goes from another account than the subuser's, whose Email Activity the lookups would search
            raise InvalidInput(
                f"a mail send cannot impersonate a subuser ({self._sdk.impersonate_subuser!r}): SendGrid's Mail Send "
                "takes no On-Behalf-Of header; build this client with the subuser's own API key to send as the "
                "subuser (and give the reconciler that key); nothing was sent or recorded"
            )
        body = _rules.message_body(message)
        key = IntentKey.parse(intent_key)
        # stamp() is pure and is exactly what dispatch will do: run it now, so a message it refuses (our
        # custom_args taken, custom_args over 10,000 bytes with ours) raises InvalidInput before the ledger
        # records anything and before anything is sent.
        _rules.stamp(body, self.adapter.provider_key(self.tenant, key))
        request = EffectRequest(
            operation=_rules.OPERATION,
            params=body,
            summary={"recipients": str(_rules.recipient_count(body))},
        )
        receipt = self.ledger.execute(self.adapter, request, intent_key=key, tenant=self.tenant)
        if receipt.response is not None:
            receipt.response.from_ledger = False  # one question for both answers: was this call sent?
            sent: SendResponse = receipt.response  # python-http-client's Response, untyped
            return sent
        return LedgerResponse(receipt.record.provider_result_id)

    @property
    def client(self) -> Any:
        """The SDK's ``client`` (reads, other endpoints), refusing a mail send that would bypass the ledger."""
        return guarded_client(self._sdk)

    @client.setter
    def client(self, value: Any) -> None:
        """Set on the SDK, as on the plain client: an HTTP client is guarded, anything else (a test's stub) kept."""
        self._replaced.append(self._sdk.client)
        self._sdk.client = value
        guarded_client(self._sdk)

    @client.deleter
    def client(self) -> None:
        """Back to the client before the last set (``mock.patch.object(sg, "client", ...)`` deletes what it set)."""
        if self._replaced:
            self._sdk.client = self._replaced.pop()

    def set_sendgrid_data_residency(self, region: str) -> None:
        """The SDK's own (a new client for the region's host), then that client guarded and given this wrapper's
        timeout, as at construction: the SDK object is reachable, and would otherwise send mail unguarded."""
        self._sdk.set_sendgrid_data_residency(region)
        self._sdk.client.timeout = self._timeout
        guarded_client(self._sdk)

    def reconcile(self, *, intent_key: IntentKey | str) -> EffectRecord:
        """Try to settle an unknown send from evidence or the Email Activity API; never resends."""
        return self.ledger.reconcile(self.adapter, intent_key=intent_key, tenant=self.tenant)

    if TYPE_CHECKING:  # the SDK's attributes __getattr__ forwards, named, so a misspelt one is a type error
        api_key: str | None
        auth: str
        host: str
        impersonate_subuser: str | None
        version: str
        useragent: str

        def reset_request_headers(self) -> None: ...

    else:

        def __getattr__(self, name: str) -> Any:
            """Everything else is the SDK's own (``host``, ``reset_request_headers``...)."""
            if name == "_sdk":  # not yet set: fail plainly instead of recursing
                raise AttributeError(name)
            return getattr(self._sdk, name)
