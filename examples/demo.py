"""The crash window, told with the real stripe SDK, a fake Stripe on 127.0.0.1 and the embedded SQLite ledger.

1. Worker A charges invoice inv_42 with ``stripe_safe.StripeClient``. Fake Stripe commits the PaymentIntent
   and, at that very moment, the worker is SIGKILLed: the response is lost, the ledger row is left in flight.
2. Worker B restarts the job with the same intent key. It finds A's lease expired, records the outcome as
   unknown, and reconciles by replaying the same idempotency key inside Stripe's 24 h window: Stripe answers
   with the PaymentIntent it already made (``Idempotent-Replayed: true``).
3. Both sides: one PaymentIntent at the provider, one confirmed row in the ledger, and its audit trail.

Run it with ``python3 dev.py demo``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from safe_effects import EffectOutcome, LeasePolicy, Ledger
from safe_effects.testing import FakeRequest
from stripe_safe import StripeClient
from stripe_safe.testing import FakeStripe

KEY = "invoice:inv_42:collect:v1"
CHARGE = {"amount": 4200, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True}


def worker(store_url: str, stripe_url: str) -> None:
    """One job run: charge the invoice, print the outcome as JSON. Leases are short so the demo is quick."""
    lease = LeasePolicy(duration=timedelta(seconds=1), wait_for_other=timedelta(seconds=10))
    with Ledger.open(store_url, lease=lease) as ledger:
        client = StripeClient("sk_test_demo", ledger=ledger, base_addresses={"api": stripe_url})
        try:
            intent = client.v1.payment_intents.create(params=CHARGE, options={"idempotency_key": KEY})
            print(json.dumps({"outcome": "confirmed", "payment_intent": intent.id, "status": intent.status}))
        except EffectOutcome as outcome:
            print(json.dumps({"outcome": outcome.code, "message": str(outcome)}))


def run_worker(store_url: str, stripe: FakeStripe, *, kill_on_commit: bool) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, __file__, "--worker", store_url, stripe.url]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_on_commit:

        def kill_worker(request: FakeRequest) -> None:
            stripe.server.clear_hooks()
            os.kill(process.pid, signal.SIGKILL)

        stripe.server.on_committed(kill_worker)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="safe-effects-demo-"))
    store_url = f"sqlite:///{workdir / 'ledger.sqlite3'}"
    with FakeStripe() as stripe, Ledger.open(store_url) as ledger:
        print(f"ledger {store_url}\nfake Stripe {stripe.url}\n")

        print("1. worker A charges inv_42 and is SIGKILLed the moment Stripe commits the PaymentIntent")
        killed = run_worker(store_url, stripe, kill_on_commit=True)
        print(
            f"   worker A exit status {killed.returncode} (SIGKILL); Stripe PaymentIntents: "
            f"{len(stripe.payment_intents)}; ledger row: {ledger.get(KEY).status}\n"
        )

        print("2. worker B restarts the job with the same intent key")
        restarted = run_worker(store_url, stripe, kill_on_commit=False)
        print(f"   worker B: {restarted.stdout.strip() or restarted.stderr.strip()}\n")

        print("3. both sides")
        print(f"   Stripe PaymentIntents: {len(stripe.payment_intents)}")
        for request in stripe.requests("POST"):
            print(f"   POST {request.path}  Idempotency-Key: {request.header('Idempotency-Key')}")
        record = ledger.get(KEY)
        print("   ledger row:")
        print(
            "   " + json.dumps(record.model_dump(mode="json", exclude_defaults=True), indent=4).replace("\n", "\n   ")
        )
        print("   audit trail:")
        for entry in ledger.store.audit_trail(record.tenant, record.intent_key):
            print(f"     {entry.from_status or '-':>9} -> {entry.to_status:<10} {entry.reason}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
