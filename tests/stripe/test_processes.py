"""Two real worker processes race on one intent key: one PaymentIntent, both get it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from safe_effects import EffectStatus
from stripe_safe.testing import FakeStripe

from .conftest import KEY, Env

WORKER = Path(__file__).with_name("_worker.py")


def test_two_processes_on_one_key_make_one_payment_intent(env: Env, fake: FakeStripe) -> None:
    fake.processing_seconds = 0.5  # the first holds its key while the second arrives
    workers = [
        subprocess.Popen([sys.executable, str(WORKER), env.store_url, fake.url, KEY], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    answers = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
    assert len(fake.payment_intents) == 1
    assert fake.effect_count("payment_intents.create") == 1
    assert len(fake.requests("POST")) == 1
    only = fake.payment_intents[0]["id"]
    assert answers == [{"id": only}, {"id": only}]
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, only)
