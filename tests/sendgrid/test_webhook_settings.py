"""``check_event_webhook``: what the account's Event Webhooks post to our endpoint, asked of FakeSendGrid's
``/v3/user/webhooks/event/settings/all`` through the real SDK (wrapped and plain), and what that leaves
unsettled."""

from __future__ import annotations

from typing import Any

import pytest
import sendgrid
from python_http_client.exceptions import UnauthorizedError

from safe_effects import EffectStatus, EffectUnknown, Ledger
from safe_effects.testing import Fault
from sendgrid_safe import (
    DECIDING_EVENTS,
    SendGridAPIClient,
    WebhookSignatureError,
    check_event_webhook,
    ingest_events,
)
from sendgrid_safe.testing import FakeSendGrid, WebhookSigner

ENDPOINT = "https://billing.example.com/sendgrid/events"
SETTINGS = "/v3/user/webhooks/event/settings/all"


def test_a_signed_webhook_posting_what_decides_to_the_endpoint_has_no_problem(
    fake: FakeSendGrid, sg: SendGridAPIClient, raw: sendgrid.SendGridAPIClient
) -> None:
    ours = fake.add_event_webhook(ENDPOINT)
    fake.add_event_webhook(ENDPOINT, enabled=False)  # an old one, switched off: not counted
    fake.add_event_webhook("https://analytics.example.com/hook", events=["open", "click"])
    for client in (sg, raw):  # the wrapped client passes the read through; the SDK's own works alike
        setup = check_event_webhook(client, ENDPOINT + "/", public_key=fake.signer.public_key)  # same address
        assert setup.ok
        assert setup.problems == ()
        assert setup.webhook_ids == (ours["id"],)
        assert setup.events == frozenset(DECIDING_EVENTS)
    assert len(fake.requests("GET", SETTINGS)) == 2
    assert fake.sends() == []  # a read: nothing was sent


@pytest.mark.parametrize(
    ("webhooks", "problems"),
    [
        pytest.param([], ["no Event Webhook posts to", "(the account has none)"], id="none"),
        pytest.param(
            [{"url": "https://old.example.com/events"}],
            ["no Event Webhook posts to", "(they post to https://old.example.com/events)"],
            id="elsewhere",
        ),
        pytest.param([{"enabled": False}], ["is disabled"], id="disabled"),
        pytest.param(
            [{"events": ["deferred", "bounce", "dropped"]}],
            ["posts neither delivered nor processed events"],
            id="nothing-confirms",
        ),
        pytest.param([{"events": ["processed", "delivered"]}], ["does not post dropped events"], id="no-drops"),
        pytest.param([{"signed": False}], ["posts unsigned events"], id="unsigned"),
    ],
)
def test_a_webhook_that_leaves_lost_sends_unknown_says_which_and_why(
    fake: FakeSendGrid, sg: SendGridAPIClient, webhooks: list[dict[str, Any]], problems: list[str]
) -> None:
    for webhook in webhooks:
        options = dict(webhook)  # the parameters are shared by the test's runs on each store
        fake.add_event_webhook(options.pop("url", ENDPOINT), **options)
    setup = check_event_webhook(sg, ENDPOINT, public_key=fake.signer.public_key)
    assert not setup.ok
    assert len(setup.problems) == 1
    for words in problems:
        assert words in setup.problems[0]
    assert "stays unknown" in setup.problems[0] or "never confirmed" in setup.problems[0]


def test_an_endpoint_that_verifies_nothing_takes_an_unsigned_webhook(fake: FakeSendGrid, sg: SendGridAPIClient) -> None:
    fake.add_event_webhook(ENDPOINT, signed=False)
    assert check_event_webhook(sg, ENDPOINT, public_key=None).ok


def test_a_webhook_signing_with_another_key_is_named_and_its_events_are_indeed_refused(
    fake: FakeSendGrid, sg: SendGridAPIClient, ledger: Ledger, key: str, mail: Any
) -> None:
    webhook = fake.add_event_webhook(ENDPOINT)
    endpoints_key = WebhookSigner().public_key  # the endpoint was given the key of another account, say
    setup = check_event_webhook(sg, ENDPOINT, public_key=endpoints_key)
    assert setup.problems == (
        f"Event Webhook {webhook['id']} signs with another key than the endpoint verifies with: every batch is "
        "refused (403) and every lost send stays unknown; give the endpoint the webhook's public_key",
    )
    # what the problem says happens: a lost send's events, signed by SendGrid, are refused by that endpoint
    fake.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        sg.send(mail(), intent_key=key)
    body, headers = fake.webhook_request(fake.events(fake.messages[0]))
    with pytest.raises(WebhookSignatureError):
        ingest_events(ledger, body, headers, public_key=endpoints_key)
    assert ledger.get(key).status is EffectStatus.UNKNOWN
    # with the key the check reads off the webhook, the same batch confirms the one message sent
    ingest_events(ledger, body, headers, public_key=webhook["public_key"])
    assert ledger.get(key).status is EffectStatus.CONFIRMED
    assert fake.effect_count() == 1


def test_a_refused_question_is_raised_never_read_as_no_problem(fake: FakeSendGrid) -> None:
    fake.add_event_webhook(ENDPOINT)
    stranger = sendgrid.SendGridAPIClient("SG.another-key", host=fake.url)
    with pytest.raises(UnauthorizedError):
        check_event_webhook(stranger, ENDPOINT, public_key=None)


def test_the_fake_refuses_a_switch_sendgrid_does_not_have(fake: FakeSendGrid) -> None:
    with pytest.raises(ValueError, match="no Event Webhook switch \\['delivery'\\]"):
        fake.add_event_webhook(ENDPOINT, events=["delivery"])
    assert fake.event_webhooks == []
