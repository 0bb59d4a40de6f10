"""A separate worker process: ``python _worker.py STORE_URL FAKE_URL KEY`` creates one PaymentIntent."""

from __future__ import annotations

import json
import sys

from safe_effects import Ledger
from stripe_safe import StripeClient


def main(store_url: str, fake_url: str, key: str) -> None:
    ledger = Ledger.open(store_url)
    client = StripeClient("sk_test_worker", ledger=ledger, base_addresses={"api": fake_url})
    try:
        intent = client.v1.payment_intents.create(
            params={"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True},
            options={"idempotency_key": key},
        )
        print(json.dumps({"id": intent.id}))
    except Exception as error:  # reported to the parent test, which asserts on it
        print(json.dumps({"error": type(error).__name__}))
    finally:
        ledger.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
