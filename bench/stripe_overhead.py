"""What the ledger adds to ``payment_intents.create``, against the raw SDK on the same fake Stripe.

Per store (SQLite file; PostgreSQL schema when reachable), interleaved in one loop against one in-process
FakeStripe: a raw ``stripe.StripeClient`` call, a wrapped ``stripe_safe.StripeClient`` call (new intent each,
same RequestsClient transport, SDK retries off on both) and the store's raw two-commit floor (see
_harness.py). Prints the medians, the added time per call and added ÷ two-commit (target <= 1.5).

    .venv/bin/python bench/stripe_overhead.py [--calls 150] [--seconds 40] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import itertools
import uuid

import stripe
from _harness import Calls, overhead_main

from safe_effects import Ledger
from stripe_safe import StripeClient
from stripe_safe.testing import FakeStripe

PARAMS = {"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True}


def calls(fake: FakeStripe, ledger: Ledger) -> Calls:
    raw = stripe.StripeClient(
        "sk_test_bench",
        base_addresses={"api": fake.url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=(5.0, 30.0)),
    )
    wrapped = StripeClient(
        "sk_test_bench",
        ledger=ledger,
        base_addresses={"api": fake.url},
        http_client=stripe.RequestsClient(timeout=(5.0, 30.0)),
    )
    run_id = uuid.uuid4().hex[:8]
    counter = itertools.count()
    return Calls(
        raw=lambda: raw.v1.payment_intents.create(
            params=PARAMS,  # type: ignore[arg-type]
            options={"idempotency_key": f"bench:{run_id}_{next(counter)}:raw:v1"},
        ),
        wrapped=lambda: wrapped.v1.payment_intents.create(
            params=PARAMS,  # type: ignore[arg-type]
            options={"idempotency_key": f"bench:{run_id}_{next(counter)}:collect:v1"},
        ),
    )


if __name__ == "__main__":
    overhead_main(__doc__ or "", fake=FakeStripe, calls=calls)
