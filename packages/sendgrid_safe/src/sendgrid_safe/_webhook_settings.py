"""Whether SendGrid's Event Webhook posts what settles a lost send to our endpoint, asked of SendGrid itself.

SendGrid has no idempotency: a send whose 202 was lost is settled by the events the Event Webhook posts
(docs/providers/sendgrid.md, Lookup strategy), or by the Email Activity add-on. A webhook that posts elsewhere,
is switched off, leaves out the events that decide, or signs with a key the endpoint does not verify with (so
the endpoint refuses every batch) leaves every lost send unknown, and nothing says so before the first one.
:func:`check_event_webhook` says so at deploy time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ._signature import PublicKey, load_public_key

# the webhook settings' event switches that carry a verdict (see sendgrid_safe.event_verdict)
DECIDING_EVENTS = ("processed", "delivered", "deferred", "bounce", "dropped")


@dataclass(frozen=True, slots=True)
class EventWebhookSetup:
    """What the account's Event Webhooks post to ``url``, and what that leaves unsettled."""

    url: str
    webhook_ids: tuple[str, ...]  # the enabled webhooks posting to ``url``
    events: frozenset[str]  # the deciding events those post (SendGrid's names: delivered, dropped ...)
    problems: tuple[str, ...]  # each a lost send that would stay unknown, and why; empty when none

    @property
    def ok(self) -> bool:
        return not self.problems


def check_event_webhook(sendgrid_client: Any, url: str, *, public_key: str | PublicKey | None) -> EventWebhookSetup:
    """Ask SendGrid (``GET /v3/user/webhooks/event/settings/all``) what its Event Webhooks post to ``url``,
    the address of the endpoint that runs ``ingest_events``, through a SendGrid client (this package's or the
    SDK's own).

    ``public_key`` is what that endpoint verifies with, as ``ingest_events`` takes it: ``None`` when it verifies
    nothing. The API key needs read access to the webhook settings; an error answer is raised as the SDK's
    ``python_http_client`` exception, never read as "no problem".
    """
    answer = sendgrid_client.client.user.webhooks.event.settings._("all").get()
    webhooks = json.loads(answer.body or b"{}").get("webhooks") or []
    ours = [hook for hook in webhooks if _same_address(str(hook.get("url", "")), url)]
    enabled = [hook for hook in ours if hook.get("enabled")]
    posted = frozenset(kind for hook in enabled for kind in DECIDING_EVENTS if hook.get(kind))
    problems = _address_problems(url, ours, enabled, webhooks)
    if enabled:
        problems += _event_problems(posted)
        problems += [problem for hook in enabled if (problem := _signing_problem(hook, public_key))]
    return EventWebhookSetup(url, tuple(str(hook.get("id", "")) for hook in enabled), posted, tuple(problems))


def _same_address(configured: str, url: str) -> bool:
    return configured.rstrip("/") == url.rstrip("/")


def _address_problems(
    url: str, ours: list[Mapping[str, Any]], enabled: list[Mapping[str, Any]], webhooks: list[Mapping[str, Any]]
) -> list[str]:
    if not ours:
        elsewhere = sorted({str(hook.get("url", "")) for hook in webhooks})
        where = f"they post to {', '.join(elsewhere)}" if elsewhere else "the account has none"
        return [
            f"no Event Webhook posts to {url} ({where}): every lost send stays unknown unless the Email "
            "Activity lookup finds it"
        ]
    if not enabled:
        return [
            f"the Event Webhook posting to {url} is disabled: every lost send stays unknown unless the Email "
            "Activity lookup finds it"
        ]
    return []


def _event_problems(posted: frozenset[str]) -> list[str]:
    problems = []
    if not posted & {"delivered", "processed"}:
        problems.append(
            "the Event Webhook posts neither delivered nor processed events: a lost send that SendGrid delivered "
            "is never confirmed"
        )
    if "dropped" not in posted:
        problems.append(
            "the Event Webhook does not post dropped events: a lost single-recipient send that SendGrid dropped "
            "stays unknown"
        )
    return problems


def _signing_problem(hook: Mapping[str, Any], public_key: str | PublicKey | None) -> str | None:
    if public_key is None:
        return None
    signed_with = hook.get("public_key")
    if not signed_with:
        return (
            f"Event Webhook {hook.get('id', '')} posts unsigned events, which an endpoint verifying a public key "
            "refuses (403): every batch is refused and every lost send stays unknown; turn signing on"
        )
    if _der(load_public_key(str(signed_with))) != _der(load_public_key(public_key)):
        return (
            f"Event Webhook {hook.get('id', '')} signs with another key than the endpoint verifies with: every "
            "batch is refused (403) and every lost send stays unknown; give the endpoint the webhook's public_key"
        )
    return None


def _der(key: PublicKey) -> bytes:
    return key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
