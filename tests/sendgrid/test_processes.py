"""Two worker processes send the same intent at the same moment: SendGrid sees one message."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

from safe_effects import EffectRecord, EffectStatus
from safe_effects.testing import Fault
from sendgrid_safe.testing import FakeSendGrid

WORKER = """
import sys, time
from safe_effects import Ledger
from sendgrid_safe import SendGridAPIClient

store_url, host, key, start = sys.argv[1:5]
ledger = Ledger.open(store_url)
sg = SendGridAPIClient("SG.fake-key", host=host, ledger=ledger, timeout=10)
message = {
    "personalizations": [{"to": [{"email": "customer@example.com"}]}],
    "from": {"email": "billing@example.com"},
    "subject": "Your invoice",
    "content": [{"type": "text/plain", "value": "Thanks."}],
}
time.sleep(max(0.0, float(start) - time.time()))
response = sg.send(message, intent_key=key)
print(type(response).__name__, response.status_code, response.headers["X-Message-Id"])
"""


def test_two_processes_on_one_intent_send_one_message(
    fake: FakeSendGrid, store_url: str, record: Callable[[str], EffectRecord], key: str
) -> None:
    fake.inject(Fault.delay(1.0))  # the winner's 202 takes a second: the loser arrives meanwhile
    start = str(time.time() + 3.0)  # both past their imports, then go together
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, store_url, fake.url, key, start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [worker.communicate(timeout=60) for worker in workers]
    assert [w.returncode for w in workers] == [0, 0], [err for _, err in outputs]
    answers = sorted(out.split() for out, _ in outputs)
    message_id = fake.messages[0].message_id
    assert answers == [["LedgerResponse", "202", message_id], ["Response", "202", message_id]]
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)
    assert record(key).status is EffectStatus.CONFIRMED
    assert record(key).provider_result_id == message_id
