"""Two worker processes sending the same intent at once: SES dedupes nothing, the ledger must."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from safe_effects import EffectStatus, Ledger
from safe_effects.testing import Fault
from ses_safe.testing import MotoFaultProxy, moto_sent_messages

WORKER = Path(__file__).with_name("_send_worker.py")
KEY = "invoice:inv_9:email:v1"


def test_two_processes_on_one_intent_send_one_message(
    store_url: str, proxy: MotoFaultProxy, moto: str, ledger: Ledger
) -> None:
    proxy.inject(Fault.delay(1.0))  # the first send holds its lease a while; the second must wait for it
    workers = [
        subprocess.Popen([sys.executable, str(WORKER), store_url, proxy.url, KEY], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    answers = [json.loads(worker.communicate(timeout=60)[0]) for worker in workers]

    [sent] = moto_sent_messages(moto)
    assert len(proxy.sends()) == 1
    assert [answer["MessageId"] for answer in answers] == [sent["id"], sent["id"]]
    assert sorted(answer["FromLedger"] for answer in answers) == [False, True]
    record = ledger.get(KEY)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == sent["id"]
