"""A fake SendGrid on 127.0.0.1 that the real SDK talks to: Mail Send, Email Activity search, webhook events
and the Event Webhook settings that say where those go.

Mail Send in sandbox mode (``mail_settings.sandbox_mode.enable``) validates and answers 200, as SendGrid
does, and keeps nothing. Activity search understands clauses joined by `` AND ``:
``unique_args['NAME']="VALUE"``, ``msg_id="ID"`` and ``msg_id LIKE 'PREFIX%'``; anything else is a 400.
Faults come from the base server's ``inject``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from safe_effects.testing import FakeHTTPServer, FakeRequest, FakeResponse, Fault
from sendgrid_safe._rules import MAX_PERSONALIZATIONS, sandboxed
from sendgrid_safe._webhook_settings import DECIDING_EVENTS

from ._signing import WebhookSigner

_CLAUSE = re.compile(
    r"""unique_args\['(?P<arg>[^']+)'\]="(?P<value>[^"]*)"|msg_id="(?P<id>[^"]*)"|msg_id LIKE '(?P<prefix>[^'%]*)%'"""
)


@dataclass(frozen=True, slots=True)
class SentMessage:
    """One accepted Mail Send request, as the fake stored it."""

    message_id: str  # the X-Message-Id answered
    body: Mapping[str, Any]
    accepted_at: float

    @property
    def custom_args(self) -> dict[str, str]:
        """Message-level custom_args, overridden per key by the first personalization's (SendGrid's rule)."""
        merged = dict(self.body.get("custom_args") or {})
        personalizations = self.body.get("personalizations") or [{}]
        merged.update(personalizations[0].get("custom_args") or {})
        return merged

    @property
    def recipients(self) -> list[str]:
        return [
            r["email"]
            for p in self.body.get("personalizations") or []
            for field in ("to", "cc", "bcc")
            for r in p.get(field) or []
        ]


def _errors(status: int, message: str, field: str | None = None) -> FakeResponse:
    return FakeResponse.json(status, {"errors": [{"message": message, "field": field, "help": None}]})


MAIL_SEND = "mail.send"  # the one write this fake serves, as effect_count names it


class FakeSendGrid:
    """Serve ``/v3/mail/send``, ``/v3/messages`` and the Event Webhook settings; record messages; build and sign
    webhook events."""

    def __init__(self, *, api_key: str = "SG.fake-key") -> None:
        self.api_key = api_key
        self.signer = WebhookSigner()
        self.server = FakeHTTPServer(self._handle)
        self.server.on_received(self._arrived)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        """Forget messages, requests, faults and settings: one running fake can serve many tests."""
        self.server.reset()  # faults, and the server's recorded exchanges
        self.activity_enabled = True  # False: the account lacks the add-on, searches get 403
        self.activity_visible = True  # False: accepted messages are not indexed yet (activity lag)
        self.accept_body = b""  # SendGrid's 202 is empty; give it bytes to make a cut_body fault bite
        self.event_webhooks: list[dict[str, Any]] = []  # the account's Event Webhook settings, as SendGrid lists them
        with self._lock:
            self._arrivals: list[FakeRequest] = []
            self._messages: list[SentMessage] = []

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> FakeSendGrid:
        self.server.start()
        return self

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> FakeSendGrid:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inject(self, fault: Fault) -> None:
        self.server.inject(fault)

    @property
    def messages(self) -> list[SentMessage]:
        with self._lock:
            return list(self._messages)

    def effect_count(self, operation: str = MAIL_SEND) -> int:
        """Messages SendGrid would deliver: what a duplicate send would make 2. Called like FakeStripe's;
        ``mail.send`` is the one operation served, any other is refused so a typo cannot read 0."""
        if operation != MAIL_SEND:
            raise ValueError(f"FakeSendGrid serves no operation {operation!r}; known: {MAIL_SEND}")
        return len(self.messages)

    def requests(self, method: str | None = None, path: str | None = None) -> list[FakeRequest]:
        """Requests since the last reset, counted on arrival (a delayed or dropped one too)."""
        with self._lock:
            arrivals = list(self._arrivals)
        return [r for r in arrivals if method in (None, r.method) and path in (None, r.path)]

    def sends(self) -> list[FakeRequest]:
        """Every request that reached /v3/mail/send, accepted or not."""
        return self.requests("POST", "/v3/mail/send")

    def _arrived(self, request: FakeRequest) -> None:
        with self._lock:
            self._arrivals.append(request)

    # -- webhook events -----------------------------------------------------------------------------------

    def events(
        self, message: SentMessage, kinds: Iterable[str] = ("processed", "delivered"), **fields: Any
    ) -> list[dict[str, Any]]:
        """Events for every recipient of ``message``, custom_args as top-level fields like SendGrid's."""
        out: list[dict[str, Any]] = []
        for index, email in enumerate(message.recipients):
            for kind in kinds:
                out.append(
                    {
                        "email": email,
                        "timestamp": int(time.time()),
                        "smtp-id": f"<{message.message_id}@fake.sendgrid>",
                        "event": kind,
                        "sg_event_id": f"{message.message_id}-{index}-{kind}",
                        "sg_message_id": f"{message.message_id}.filterdrecv-fake-{index}.0",
                        **message.custom_args,
                        **fields,
                    }
                )
        return out

    def webhook_request(self, events: Any, *, sign: bool = True) -> tuple[bytes, dict[str, str]]:
        """The raw body and headers SendGrid would POST (signed with ``signer``'s key unless told not to)."""
        body = json.dumps(events).encode()
        headers = {"Content-Type": "application/json"}
        if sign:
            headers |= self.signer.headers(body, str(int(time.time())))
        return body, headers

    def post_events(self, url: str, events: Any, *, sign: bool = True) -> int:
        """POST events to a webhook endpoint like SendGrid does; returns the HTTP status."""
        body, headers = self.webhook_request(events, sign=sign)
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    def add_event_webhook(
        self,
        url: str,
        *,
        events: Iterable[str] = DECIDING_EVENTS,
        enabled: bool = True,
        signed: bool = True,
    ) -> dict[str, Any]:
        """Configure an Event Webhook posting ``events`` to ``url``, signed with ``signer``'s key unless told not
        to; returns its settings as ``GET /v3/user/webhooks/event/settings/all`` lists them."""
        engagement = ("open", "click", "spam_report", "unsubscribe", "group_unsubscribe", "group_resubscribe")
        switches = (*DECIDING_EVENTS, *engagement)
        chosen = set(events)
        if unknown := chosen - set(switches):
            raise ValueError(f"no Event Webhook switch {sorted(unknown)}; known: {', '.join(switches)}")
        webhook: dict[str, Any] = {
            "id": f"fake-webhook-{len(self.event_webhooks) + 1}",
            "url": url,
            "enabled": enabled,
            **{switch: switch in chosen for switch in switches},
        }
        if signed:
            webhook["public_key"] = self.signer.public_key  # listed only for a signed webhook, as SendGrid does
        self.event_webhooks.append(webhook)
        return webhook

    # -- the provider's rules -----------------------------------------------------------------------------

    def _handle(self, request: FakeRequest) -> FakeResponse:
        if request.header("authorization") != f"Bearer {self.api_key}":
            return _errors(401, "The provided authorization grant is invalid, expired, or revoked")
        if request.method == "POST" and request.path == "/v3/mail/send":
            return self._send(request)
        if request.method == "GET" and request.path == "/v3/messages":
            return self._search(request)
        if request.method == "GET" and request.path == "/v3/user/webhooks/event/settings/all":
            return FakeResponse.json(200, {"max_allowed": 5, "webhooks": self.event_webhooks})
        return _errors(404, f"no fake route for {request.method} {request.path}")

    def _send(self, request: FakeRequest) -> FakeResponse:
        try:
            body = request.json()
        except ValueError:
            return _errors(400, "Bad Request")
        if not isinstance(body, dict):
            return _errors(400, "Bad Request")
        if not body.get("personalizations"):
            return _errors(400, "The personalizations field is required.", "personalizations")
        if len(body["personalizations"]) > MAX_PERSONALIZATIONS:
            return _errors(400, f"The personalizations field cannot have more than {MAX_PERSONALIZATIONS} items.")
        if not isinstance(body.get("from"), dict) or not body["from"].get("email"):
            return _errors(400, "The from object must be provided for every email send.", "from")
        if sandboxed(body):  # validated, never delivered: 200, no X-Message-Id, no event, nothing kept
            return FakeResponse(200)
        message = SentMessage(f"fake{next(self._ids):018d}", body, time.time())
        with self._lock:
            self._messages.append(message)
        return FakeResponse(202, self.accept_body, {"X-Message-Id": message.message_id}, committed=True)

    def _search(self, request: FakeRequest) -> FakeResponse:
        if not self.activity_enabled:
            return _errors(403, "access forbidden")
        query = (request.query.get("query") or [""])[0]
        clauses = query.split(" AND ") if query else []
        matches = [_CLAUSE.fullmatch(c.strip()) for c in clauses]
        if any(m is None for m in matches):
            return _errors(400, f"invalid query: {query}", "query")
        limit = int((request.query.get("limit") or ["10"])[0])
        found = [
            m
            for m in (self.messages if self.activity_visible else [])
            if all(_clause_holds(match, m) for match in matches if match is not None)
        ]
        return FakeResponse.json(200, {"messages": [_activity_row(m) for m in found[:limit]]})


def _clause_holds(match: re.Match[str], message: SentMessage) -> bool:
    msg_id = f"{message.message_id}.filterdrecv-fake-0.0"
    if match["arg"] is not None:
        return message.custom_args.get(match["arg"]) == match["value"]
    if match["id"] is not None:
        return msg_id == match["id"]
    return msg_id.startswith(match["prefix"])


def _activity_row(message: SentMessage) -> dict[str, Any]:
    recipients = message.recipients
    return {
        "msg_id": f"{message.message_id}.filterdrecv-fake-0.0",
        "from_email": message.body["from"]["email"],
        "subject": message.body.get("subject", ""),
        "to_email": recipients[0] if recipients else "",
        "status": "delivered",
        "opens_count": 0,
        "clicks_count": 0,
        "last_event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(message.accepted_at)),
    }
