"""A send SendGrid's drop event rejected, which a delivery event then shows went out after all: an operator
corrects it to confirmed. The drop on file must not block that correction (the delivery is the provider's own
word that it acted); left rejected, the job would send the mail again under a new key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from safe_effects import EffectStatus, EffectUnknown, Ledger, Operator
from safe_effects.testing import Fault
from sendgrid_safe import SendGridAPIClient, ingest_events
from sendgrid_safe.testing import FakeSendGrid


def _ingest(fake: FakeSendGrid, ledger: Ledger, events: list[dict[str, Any]]) -> None:
    body, headers = fake.webhook_request(events)
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == len(events)


def test_a_delivery_after_a_drop_lets_an_operator_correct_the_rejection(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Callable[..., Any]
) -> None:
    fake.activity_visible = False
    fake.inject(Fault.drop_after_commit())  # SendGrid took the message; its 202 was lost
    with pytest.raises(EffectUnknown):
        sg.send(mail(), intent_key=key)
    [message] = fake.messages

    _ingest(fake, ledger, fake.events(message, kinds=("dropped",)))
    rejected = ledger.get(key)
    assert rejected.status is EffectStatus.REJECTED
    _ingest(fake, ledger, fake.events(message, kinds=("delivered",)))  # it went out after all
    assert ledger.get(key) == rejected  # evidence alone never un-rejects; an operator does, on that evidence

    corrected = Operator(ledger).resolve(
        key, to=EffectStatus.CONFIRMED, operator="ops@example.com", reason="delivered per SendGrid's event",
        expect_version=rejected.version, provider_result_id=message.message_id, evidence="sendgrid:delivered",
    ).record  # fmt: skip
    assert (corrected.status, corrected.provider_result_id) == (EffectStatus.CONFIRMED, message.message_id)
    assert ledger.get(key) == corrected
    trail = [(a.from_status, a.to_status) for a in ledger.store.audit_trail("default", key)]
    assert trail[-1] == ("rejected", "confirmed")

    sg.send(mail(), intent_key=key)  # the job's retry: answered from the ledger
    assert len(fake.sends()) == 1
    assert fake.effect_count() == 1
    assert ledger.get(key) == corrected
