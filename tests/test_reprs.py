"""Objects a user may log show ids and summaries, never what is sent: card data, keys, addresses, bodies."""

from __future__ import annotations

from datetime import UTC, datetime

from safe_effects import EffectRecord, EffectRequest, EffectStatus, Receipt
from ses_safe import SendPayload
from stripe_safe import StripeCall

CARD, KEY, EMAIL, BODY = "4242424242424242", "sk_test_per_call_secret", "jane.doe@example.com", "Your receipt"


def test_a_request_shows_its_operation_and_summary_only() -> None:
    request = EffectRequest(
        operation="payment_intents.create",
        params={"card": CARD, "receipt_email": EMAIL},
        payload={"api_key": KEY},
        summary={"amount": "4200", "currency": "eur"},
    )
    shown = repr(request)
    assert "payment_intents.create" in shown
    assert "4200" in shown
    assert not any(secret in shown for secret in (CARD, EMAIL, KEY))


def test_a_receipt_leaves_the_providers_object_out() -> None:
    now = datetime(2026, 11, 29, tzinfo=UTC)
    record = EffectRecord(
        tenant="default",
        intent_key="invoice:inv_1:collect:v1",
        provider="stripe",
        operation="payment_intents.create",
        request_digest="sha256:" + "0" * 64,
        status=EffectStatus.CONFIRMED,
        provider_result_id="pi_1",
        created_at=now,
        updated_at=now,
    )
    shown = repr(Receipt(record=record, response={"receipt_email": EMAIL, "card": CARD}))
    assert "pi_1" in shown
    assert not any(secret in shown for secret in (CARD, EMAIL))


def test_the_sdk_calls_the_wrappers_build_leave_params_and_keys_out() -> None:
    stripe_call = StripeCall("post", "/v1/payment_intents", {"card": CARD}, {"api_key": KEY}, "api", None)
    ses_call = SendPayload("send_email", {"Destination": {"ToAddresses": [EMAIL]}, "Subject": BODY}, "EmailTags", "t")
    for shown in (repr(stripe_call), repr(ses_call)):
        assert not any(secret in shown for secret in (CARD, KEY, EMAIL, BODY))
    assert "/v1/payment_intents" in repr(stripe_call)
    assert "send_email" in repr(ses_call)
