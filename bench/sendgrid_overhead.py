"""What the ledger adds to a SendGrid send: wrapped vs raw SDK against the same fake, on SQLite and PostgreSQL.

Per store (SQLite file; PostgreSQL schema when reachable), interleaved in one loop against one FakeSendGrid
served from its own process (like a remote SendGrid, see _harness.fake_in_own_process): a raw
``sendgrid.SendGridAPIClient.send``, a wrapped ``sendgrid_safe.SendGridAPIClient.send``
(new intent each) and the store's raw two-commit floor (see _harness.py). Prints the medians, the added time
per call and added ÷ two-commit (target <= 1.5).

    .venv/bin/python bench/sendgrid_overhead.py [--calls 150] [--seconds 40] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import sendgrid
from _harness import Calls, fake_in_own_process, fresh_key, overhead_main

from safe_effects import Ledger
from sendgrid_safe import SendGridAPIClient

MESSAGE = {
    "personalizations": [{"to": [{"email": "customer@example.com"}]}],
    "from": {"email": "billing@example.com"},
    "subject": "Your invoice INV-42",
    "content": [{"type": "text/plain", "value": "Thanks for your order. Your invoice is attached."}],
}


API_KEY = "SG.fake-key"  # FakeSendGrid's default


def calls(fake_url: str, ledger: Ledger) -> Calls:
    raw = sendgrid.SendGridAPIClient(API_KEY, host=fake_url)
    raw.client.timeout = 10
    wrapped = SendGridAPIClient(API_KEY, host=fake_url, ledger=ledger)
    return Calls(
        raw=lambda: raw.send(MESSAGE),
        wrapped=lambda: wrapped.send(MESSAGE, intent_key=fresh_key("email")),
    )


if __name__ == "__main__":
    overhead_main(__doc__ or "", fake=lambda: fake_in_own_process("sendgrid_safe.testing:FakeSendGrid"), calls=calls)
