"""What the ledger adds to ``payment_intents.create``, against the raw SDK on the same fake Stripe.

Per store (SQLite file; PostgreSQL schema when reachable), interleaved in one loop against one FakeStripe
served from its own process (like a remote Stripe, see _harness.fake_in_own_process): a raw
``stripe.StripeClient`` call, a wrapped ``stripe_safe.StripeClient`` call (new intent each,
same RequestsClient transport, SDK retries off on both) and the store's raw two-commit floor (see
_harness.py). Prints the medians, the added time per call and added ÷ two-commit (target <= 1.5).

    .venv/bin/python bench/stripe_overhead.py [--calls 150] [--seconds 40] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import itertools
import uuid

import stripe
from _harness import Calls, fake_in_own_process, overhead_main

from safe_effects import Ledger
from stripe_safe import StripeClient

PARAMS = {"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True}


def calls(fake_url: str, ledger: Ledger) -> Calls:
    raw = stripe.StripeClient(
        "sk_test_bench",
        base_addresses={"api": fake_url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=(5.0, 30.0)),
    )
    wrapped = StripeClient(
        "sk_test_bench",
        ledger=ledger,
        base_addresses={"api": fake_url},
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
    overhead_main(__doc__ or "", fake=lambda: fake_in_own_process("stripe_safe.testing:FakeStripe"), calls=calls)
