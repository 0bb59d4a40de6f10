"""The crash window, told on the embedded SQLite ledger.

1. A worker charges invoice inv_42 and is SIGKILLed right after the provider committed the charge: the
   response is lost, the ledger row is left in flight.
2. A restarted worker finds the abandoned lease, marks the outcome unknown, and reconciles with a same-key
   replay inside the provider's idempotency window: the provider answers with the charge it already made.
3. One charge at the provider, one confirmed row in the ledger, and the audit trail of how it got there.
Run it with ``python3 dev.py demo``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from safe_effects import Ledger
from safe_effects.testing import GenericFakeProvider

KEY = "invoice:inv_42:collect:v1"


def worker(store_url: str, fake_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "safe_effects.testing._generic_worker",
        "--store",
        store_url,
        "--fake",
        str(fake_path),
        "--key",
        KEY,
        "--params",
        '{"amount": 4200, "currency": "eur"}',
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="safe-effects-demo-"))
    store_url = f"sqlite:///{workdir / 'ledger.sqlite3'}"
    fake_path = workdir / "provider.sqlite3"
    print(f"ledger: {store_url}\n")

    print("1. worker A charges inv_42 and is killed after the provider accepted the charge")
    killed = worker(store_url, fake_path, "--crash-at", "after_provider_accept")
    print(f"   worker A exit status: {killed.returncode} (SIGKILL is {-signal.SIGKILL})")
    provider = GenericFakeProvider(fake_path)
    ledger = Ledger.open(store_url)
    print(f"   provider charges so far: {len(provider.effects())}; ledger row: {ledger.get(KEY).status}\n")

    print("2. worker B restarts the job with the same intent key")
    restarted = worker(store_url, fake_path)
    print(f"   worker B says: {restarted.stdout.strip()}\n")

    record = ledger.get(KEY)
    print("3. both sides")
    print(f"   provider charges: {len(provider.effects())}  requests that reached it: {len(provider.requests())}")
    print("   ledger row:")
    print(json.dumps(record.model_dump(mode="json", exclude_defaults=True), indent=4))
    print("   audit trail:")
    for entry in ledger.store.audit_trail(record.tenant, record.intent_key):
        print(f"     {entry.at:%H:%M:%S}  {entry.from_status or '-':>9} -> {entry.to_status:<10} {entry.reason}")
    ledger.close()


if __name__ == "__main__":
    main()
