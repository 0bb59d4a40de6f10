"""The provider fakes' own test surface: a count asked for an operation the fake never serves is refused, and
a fake that is not serving has no URL to point an SDK at."""

from __future__ import annotations

import pytest
import sendgrid

from sendgrid_safe.testing import FakeSendGrid
from stripe_safe.testing import FakeStripe


def test_effect_count_refuses_an_operation_the_fake_does_not_serve(fake_stripe: FakeStripe) -> None:
    assert fake_stripe.effect_count("payment_intents.create") == 0
    with pytest.raises(ValueError, match=r"no operation 'payment_intent\.create'; known: .*payment_intents\.create"):
        fake_stripe.effect_count("payment_intent.create")  # a typo must not make a both-sides check vacuous


def test_a_fake_that_is_not_serving_yet_has_no_url() -> None:
    """Before start() its port accepts connections and nothing answers: an SDK pointed at it would wait out its
    read timeout and record an unknown outcome, so the address is refused until the fake serves."""
    fake = FakeStripe()
    with pytest.raises(RuntimeError, match=r"not serving yet: call \.start\(\)"):
        _ = fake.url
    with fake:
        assert fake.url.startswith("http://127.0.0.1:")


def test_both_fakes_count_effects_the_same_way() -> None:
    """``effect_count(operation)`` on either fake; FakeSendGrid serves one operation, and refuses any other."""
    with FakeSendGrid() as fake:
        assert fake.effect_count() == fake.effect_count("mail.send") == 0
        with pytest.raises(ValueError, match=r"serves no operation 'mail\.sned'"):
            fake.effect_count("mail.sned")


def test_fake_sendgrid_reset_forgets_what_its_server_recorded_too() -> None:
    """One running fake serves many tests: after reset() neither the fake nor its server holds an old request."""
    with FakeSendGrid() as fake:
        client = sendgrid.SendGridAPIClient(api_key="SG.fake-key", host=fake.url)
        body = {
            "personalizations": [{"to": [{"email": "a@example.com"}]}],
            "from": {"email": "b@example.com"},
            "subject": "s",
            "content": [{"type": "text/plain", "value": "v"}],
        }
        client.client.mail.send.post(request_body=body)
        assert (len(fake.requests()), len(fake.server.exchanges)) == (1, 1)
        fake.reset()
        assert (len(fake.requests()), len(fake.server.exchanges), fake.effect_count()) == (0, 0, 0)
