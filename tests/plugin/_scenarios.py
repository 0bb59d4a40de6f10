"""The calls the example cassettes hold, shared by record_cassettes.py and the tests that replay them.

Cassettes are recorded against our fakes with the fake's address rewritten to the provider's real one, so a
replay runs the SDKs with their default endpoints, as a user's own recording would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import stripe

import ses_safe
from safe_effects import Ledger
from sendgrid_safe import SendGridAPIClient
from stripe_safe import StripeClient

CASSETTES = Path(__file__).with_name("cassettes")
STRIPE_CREATE = "stripe_create_payment_intent.yaml"
SENDGRID_SEND = "sendgrid_send_then_activity_search.yaml"
SES_SEND = "ses_v2_send_email.yaml"

STRIPE_API = "https://api.stripe.com"
SENDGRID_API = "https://api.sendgrid.com"
SES_API = "https://email.us-east-1.amazonaws.com"  # sesv2's default endpoint in us-east-1

STRIPE_KEY = "sk_test_safe_effects"
SENDGRID_KEY = "SG.fake-key"
AWS = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
SENDER = "billing@example.com"

CHARGE = "invoice:inv_42:collect:v1"
EMAIL = "invoice:inv_42:email:v1"
PAYMENT = {"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True}
MAIL = {
    "personalizations": [{"to": [{"email": "customer@example.com"}]}],
    "from": {"email": SENDER},
    "subject": "Your invoice",
    "content": [{"type": "text/plain", "value": "Thanks."}],
}
SES_MAIL = {
    "FromEmailAddress": SENDER,
    "Destination": {"ToAddresses": ["customer@example.com"]},
    "Content": {"Simple": {"Subject": {"Data": "Your invoice"}, "Body": {"Text": {"Data": "Thanks."}}}},
}


def collect_invoice(ledger: Ledger, api: str = STRIPE_API) -> stripe.PaymentIntent:
    client = StripeClient(STRIPE_KEY, ledger=ledger, base_addresses={"api": api})
    return client.v1.payment_intents.create(params=PAYMENT, options={"idempotency_key": CHARGE})  # type: ignore[arg-type]


def sendgrid(ledger: Ledger, host: str = SENDGRID_API) -> SendGridAPIClient:
    return SendGridAPIClient(SENDGRID_KEY, host=host, ledger=ledger, timeout=5)


def email_invoice(sg: SendGridAPIClient) -> Any:
    return sg.send(MAIL, intent_key=EMAIL)


def email_invoice_by_ses(ledger: Ledger, endpoint: str | None = None) -> dict[str, Any]:
    client = ses_safe.client("sesv2", ledger=ledger, configuration_set="safe-effects", endpoint_url=endpoint, **AWS)
    return client.send_email(IntentKey=EMAIL, **SES_MAIL)
