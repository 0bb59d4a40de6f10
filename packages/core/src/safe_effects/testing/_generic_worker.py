"""A worker process for crash-window tests: ``python -m safe_effects.testing._generic_worker ...``.

It opens the ledger and the file-backed generic fake, runs one ``execute``, and prints the outcome as one
JSON line. With ``--crash-at`` it SIGKILLs itself at that point, exactly like a worker lost in production.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta

from safe_effects._adapter import EffectRequest
from safe_effects._crash import CrashPlan
from safe_effects._errors import EffectOutcome
from safe_effects._ledger import Ledger
from safe_effects._policies import LeasePolicy
from safe_effects.testing._generic_fake import GenericFakeAdapter, GenericFakeProvider, generic_contract


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, help="ledger URL (sqlite:///... or postgresql://...)")
    parser.add_argument("--fake", required=True, help="path of the generic fake's state file")
    parser.add_argument("--key", required=True)
    parser.add_argument("--params", default="{}")
    parser.add_argument("--no-dedupe", action="store_true")
    parser.add_argument("--no-lookups", action="store_true")
    parser.add_argument("--crash-at", default="")
    parser.add_argument("--lease-seconds", type=float, default=1.0)
    parser.add_argument("--wait-seconds", type=float, default=10.0)
    args = parser.parse_args(argv)

    crash = CrashPlan.crash_at(*[p for p in args.crash_at.split(",") if p], action="sigkill")
    dedupe = not args.no_dedupe
    fake = GenericFakeProvider(args.fake, dedupe=dedupe, crash_plan=crash)
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=dedupe), lookups_enabled=not args.no_lookups)
    lease = LeasePolicy(
        duration=timedelta(seconds=args.lease_seconds), wait_for_other=timedelta(seconds=args.wait_seconds)
    )
    ledger = Ledger.open(args.store, lease=lease, crash_plan=crash)
    request = EffectRequest(operation="charge", params=json.loads(args.params))
    try:
        receipt = ledger.execute(adapter, request, intent_key=args.key)
        outcome = {"outcome": "confirmed", "result_id": receipt.provider_result_id, "from_ledger": receipt.from_ledger}
    except EffectOutcome as exc:
        outcome = {"outcome": exc.code, "message": str(exc)}
    finally:
        ledger.close()
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
