"""One worker process for every provider of the failure matrix: one wrapped call for one intent, one JSON line.

``python tests/failure_matrix/_worker.py --provider stripe --store URL --fake-url URL --key KEY`` opens the
ledger, builds the provider's drop-in client against the fake, makes the call and prints
``{"outcome": "confirmed" | <EffectOutcome.code> | ..., "status": <ledger status after>, "result_id": ...}``.

Crash points the worker hits itself (``before_dispatch``, ``after_response``, ``during_receipt_persist``)
come from ``--crash-at`` or, failing that, ``SAFE_EFFECTS_CRASH_AT``/``SAFE_EFFECTS_CRASH_ACTION``
(``CrashPlan.from_env``); the two on the provider's side are the test's business (the fake's hooks SIGKILL
this process). ``--clock-offset-hours`` moves the ledger's clock, as the test moves the fake's FakeClock,
so a retry can happen "a day later". ``--wait-go`` prints ``{"ready": true}`` once everything is imported
and opened, then waits for a line on stdin, so several workers can start their call together.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

PROVIDERS = ("stripe", "sendgrid", "ses")
SENDER = "billing@example.com"
RECIPIENT = "customer@example.com"
STRIPE_API_KEY = "sk_test_failure_matrix"
SENDGRID_API_KEY = "SG.fake-key"
SES_CONFIGURATION_SET = "safe-effects"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", required=True, choices=PROVIDERS)
    parser.add_argument("--store", required=True, help="ledger URL (postgresql://...?schema=...)")
    parser.add_argument("--fake-url", required=True, help="the provider fake (or the moto fault proxy)")
    parser.add_argument("--key", required=True, help="the intent key")
    parser.add_argument("--crash-at", default="", help="comma list of crash points; SIGKILL there")
    parser.add_argument("--clock-offset-hours", type=float, default=0.0)
    parser.add_argument("--read-timeout", type=float, default=5.0, help="the client's deadline for an answer")
    parser.add_argument("--lease-seconds", type=float, default=1.5)
    parser.add_argument("--wait-seconds", type=float, default=15.0, help="bound on waiting for another worker")
    parser.add_argument("--wait-go", action="store_true", help="print ready, then wait for a line on stdin")
    return parser.parse_args(argv)


def _clock(offset_hours: float) -> Callable[[], datetime]:
    from safe_effects import system_clock

    offset = timedelta(hours=offset_hours)
    return lambda: system_clock() + offset


def stripe_call(args: argparse.Namespace, ledger: Any) -> Callable[[], bool | None]:
    """``payment_intents.create`` for 20.00 EUR, confirmed; the intent key is the idempotency key."""
    from stripe_safe import StripeClient

    client = StripeClient(
        STRIPE_API_KEY, ledger=ledger, base_addresses={"api": args.fake_url}, timeout=(2.0, args.read_timeout)
    )

    def call() -> bool | None:
        client.v1.payment_intents.create(
            params={"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True},
            options={"idempotency_key": args.key},
        )
        return None  # the SDK object does not say whether the ledger answered

    return call


def sendgrid_call(args: argparse.Namespace, ledger: Any) -> Callable[[], bool | None]:
    """One Mail Send to one recipient."""
    from sendgrid_safe import SendGridAPIClient

    client = SendGridAPIClient(SENDGRID_API_KEY, host=args.fake_url, ledger=ledger, timeout=args.read_timeout)
    message = {
        "personalizations": [{"to": [{"email": RECIPIENT}]}],
        "from": {"email": SENDER},
        "subject": "Your invoice",
        "content": [{"type": "text/plain", "value": "Thanks."}],
    }

    def call() -> bool | None:
        response = client.send(message, intent_key=args.key)
        return bool(getattr(response, "from_ledger", False))

    return call


def ses_call(args: argparse.Namespace, ledger: Any) -> Callable[[], bool | None]:
    """One SESv2 SendEmail to one recipient, through the fault proxy in front of moto."""
    import ses_safe

    client = ses_safe.client(
        "sesv2",
        ledger=ledger,
        region_name="us-east-1",
        endpoint_url=args.fake_url,
        configuration_set=SES_CONFIGURATION_SET,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        connect_timeout=2.0,
        read_timeout=args.read_timeout,
    )
    email = {
        "FromEmailAddress": SENDER,
        "Destination": {"ToAddresses": [RECIPIENT]},
        "Content": {"Simple": {"Subject": {"Data": "Your invoice"}, "Body": {"Text": {"Data": "Thanks."}}}},
    }

    def call() -> bool | None:
        answer = client.send_email(IntentKey=args.key, **email)
        return bool(answer["SafeEffects"]["FromLedger"])

    return call


CALLS = {"stripe": stripe_call, "sendgrid": sendgrid_call, "ses": ses_call}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from safe_effects import CrashPlan, EffectOutcome, LeasePolicy, Ledger, RetryPolicy, SafeEffectsError

    points = [p for p in args.crash_at.split(",") if p]
    crash = CrashPlan.crash_at(*points, action="sigkill") if points else CrashPlan.from_env()
    ledger = Ledger.open(
        args.store,
        clock=_clock(args.clock_offset_hours),
        crash_plan=crash,
        lease=LeasePolicy(
            duration=timedelta(seconds=args.lease_seconds),
            wait_for_other=timedelta(seconds=args.wait_seconds),
            poll_interval=0.02,
        ),
        retry=RetryPolicy(max_attempts=3, max_total_seconds=10.0, initial_wait=0.05, max_wait=0.2),
    )
    call = CALLS[args.provider](args, ledger)
    if args.wait_go:
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()
    answer: dict[str, Any]
    try:
        from_ledger = call()
        answer = {"outcome": "confirmed", "from_ledger": from_ledger}
    except EffectOutcome as outcome:
        answer = {"outcome": outcome.code, "message": str(outcome)}
    except SafeEffectsError as error:  # LeaseLost, IntentConflict...: still a typed answer, but not an outcome
        answer = {"outcome": error.code, "message": str(error)}
    except Exception as error:  # reported, never hidden: the test fails on an outcome it does not expect
        answer = {"outcome": "error", "message": f"{type(error).__name__}: {error}"}
    try:
        record = ledger.store.get("default", args.key)
        answer |= {
            "status": None if record is None else record.status.value,
            "result_id": None if record is None else record.provider_result_id,
        }
    finally:
        ledger.close()
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
