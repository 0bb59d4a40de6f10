"""The provider fakes' own test surface: a count asked for an operation the fake never serves is refused."""

from __future__ import annotations

import pytest

from stripe_safe.testing import FakeStripe


def test_effect_count_refuses_an_operation_the_fake_does_not_serve(fake_stripe: FakeStripe) -> None:
    assert fake_stripe.effect_count("payment_intents.create") == 0
    with pytest.raises(ValueError, match=r"no operation 'payment_intent\.create'; known: .*payment_intents\.create"):
        fake_stripe.effect_count("payment_intent.create")  # a typo must not make a both-sides check vacuous
