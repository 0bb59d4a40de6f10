"""Example cassettes replayed with faults through the real SDKs: requests (Stripe), urllib (SendGrid), botocore."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from safe_effects import EffectStatus, EffectUnknown, Ledger
from safe_effects.testing import CassetteReplay, ReplayFault, assert_effect

from ._scenarios import (
    CHARGE,
    EMAIL,
    SENDGRID_SEND,
    SES_SEND,
    STRIPE_CREATE,
    collect_invoice,
    email_invoice,
    email_invoice_by_ses,
    sendgrid,
)

Cassette = Callable[..., AbstractContextManager[CassetteReplay]]

# fault on the create -> provider effects right after it (a lost request or a 500 before acting made none)
LOST = {"response_lost": 1, "timeout": 1, "request_lost": 0, "500": 0}


@pytest.mark.parametrize(("fault", "effects"), LOST.items(), ids=LOST.keys())
def test_stripe_lost_answer_is_unknown_then_the_same_key_replay_confirms_one_payment_intent(
    safe_cassette: Cassette, safe_ledger: Ledger, fault: str, effects: int
) -> None:
    with safe_cassette(STRIPE_CREATE, faults={0: fault}) as cassette:
        with pytest.raises(EffectUnknown):
            collect_invoice(safe_ledger)
        assert_effect(
            safe_ledger, CHARGE, status="unknown", provider_effects=cassette.provider_effects, expected_effects=effects
        )
        intent = collect_invoice(safe_ledger)
    record = assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=cassette.provider_effects)
    assert record.provider_result_id == intent.id == "pi_F0000001"
    assert record.resolution is not None
    assert record.resolution.method == "key_replay"
    assert len(cassette.requests("POST", "/v1/payment_intents")) == 2


def test_stripe_replay_of_a_lost_create_is_answered_like_stripe_answers_a_repeated_key(
    safe_cassette: Cassette, safe_ledger: Ledger
) -> None:
    with safe_cassette(STRIPE_CREATE, faults={0: "response_lost"}) as cassette:
        with pytest.raises(EffectUnknown):
            collect_invoice(safe_ledger)
        collect_invoice(safe_ledger)
    assert [(r.interaction, r.fault, r.effect, r.idempotent_replay) for r in cassette.requests()] == [
        (0, "response_lost", True, False),
        (0, None, False, True),
    ]


def test_stripe_429_is_retried_with_the_same_key_and_makes_one_payment_intent(
    safe_cassette: Cassette, safe_ledger: Ledger
) -> None:
    with safe_cassette(STRIPE_CREATE, faults={0: "429"}) as cassette:
        collect_invoice(safe_ledger)
    assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=cassette.provider_effects)
    assert [(r.fault, r.effect) for r in cassette.requests()] == [("status", False), (None, True)]


def test_stripe_late_answer_within_the_deadline_is_confirmed(safe_cassette: Cassette, safe_ledger: Ledger) -> None:
    with safe_cassette(STRIPE_CREATE, faults={0: ReplayFault.delay(0.05)}) as cassette:
        collect_invoice(safe_ledger)
    assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=cassette.provider_effects)


def test_sendgrid_lost_202_is_unknown_then_the_activity_search_confirms_it_without_a_resend(
    safe_cassette: Cassette, safe_ledger: Ledger
) -> None:
    with safe_cassette(SENDGRID_SEND, faults={0: "response_lost"}) as cassette:
        sg = sendgrid(safe_ledger)
        with pytest.raises(EffectUnknown):
            email_invoice(sg)
        assert_effect(safe_ledger, EMAIL, status="unknown", provider_effects=cassette.provider_effects)
        email_invoice(sg)
    record = assert_effect(safe_ledger, EMAIL, status="confirmed", provider_effects=cassette.provider_effects)
    assert record.provider_result_id == "fake000000000000000001"
    assert record.resolution is not None
    assert record.resolution.method == "lookup:activity_api"
    assert len(cassette.requests("POST", "/v3/mail/send")) == 1
    assert len(cassette.requests("GET", "/v3/messages")) == 1


def test_sendgrid_429_is_retried_and_sends_once(safe_cassette: Cassette, safe_ledger: Ledger) -> None:
    with safe_cassette(SENDGRID_SEND, faults={0: "429"}) as cassette:
        email_invoice(sendgrid(safe_ledger))
    assert_effect(safe_ledger, EMAIL, status="confirmed", provider_effects=cassette.provider_effects)
    assert [r.fault for r in cassette.requests("POST")] == ["status", None]


def test_ses_lost_answer_stays_unknown_and_is_never_resent(safe_cassette: Cassette, safe_ledger: Ledger) -> None:
    with safe_cassette(SES_SEND, faults={0: "response_lost"}) as cassette:
        for _ in range(2):
            with pytest.raises(EffectUnknown):
                email_invoice_by_ses(safe_ledger)
    assert_effect(safe_ledger, EMAIL, status=EffectStatus.UNKNOWN, provider_effects=cassette.provider_effects)
    assert len(cassette.requests()) == 1


def test_ses_throttling_is_retried_and_sends_once(safe_cassette: Cassette, safe_ledger: Ledger) -> None:
    throttled = ReplayFault.status_code(
        429,
        headers={"x-amzn-ErrorType": "TooManyRequestsException"},
        body=b'{"message": "Maximum sending rate exceeded."}',
    )
    with safe_cassette(SES_SEND, faults={0: throttled}) as cassette:
        answer = email_invoice_by_ses(safe_ledger)
    record = assert_effect(safe_ledger, EMAIL, status="confirmed", provider_effects=cassette.provider_effects)
    assert answer["MessageId"] == record.provider_result_id
    assert [r.fault for r in cassette.requests()] == ["status", None]
