"""A key purged and recorded again: the purged record's audit rows (they outlive a purge) decide nothing.

A yearly email reuses its intent key. Last year's record went unknown (a lost 202) before it was settled, and
was purged after the retention floor; its ``-> unknown`` row stays in the audit table. This year's send is
rate limited on every attempt (prepared again, nothing sent) and retried: it must go out. Taken for a reopened
intent whose key window closed, it would turn unknown, and SendGrid's unknowns are never resent: an email lost.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from safe_effects import EffectDeferred, EffectStatus, EffectUnknown, Ledger, RetryPolicy, purge_settled
from safe_effects.testing import FakeClock, Fault
from sendgrid_safe import SendGridAPIClient, ingest_events
from sendgrid_safe.testing import FakeSendGrid

from .conftest import API_KEY, TIMEOUT


def test_last_years_unknown_row_does_not_stop_this_years_deferred_send(
    fake: FakeSendGrid, store_url: str, key: str, mail: Callable[..., Any]
) -> None:
    clock = FakeClock()
    ledger = Ledger.open(store_url, clock=clock, retry=RetryPolicy(max_attempts=2, initial_wait=0.0, max_wait=0.0))
    try:
        sg = SendGridAPIClient(API_KEY, host=fake.url, ledger=ledger, timeout=TIMEOUT)
        fake.activity_visible = False
        fake.inject(Fault.drop_after_commit())
        with pytest.raises(EffectUnknown):
            sg.send(mail(), intent_key=key)
        body, headers = fake.webhook_request(fake.events(fake.messages[0], kinds=("delivered",)))
        ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
        assert ledger.get(key).status is EffectStatus.CONFIRMED
        assert any(a.to_status == "unknown" for a in ledger.store.audit_trail("default", key))

        clock.advance(timedelta(days=365))
        assert purge_settled(ledger.store, older_than=timedelta(days=200), now=clock()).deleted == 1

        fake.inject(Fault.status_code(429, headers={"Retry-After": "0"}, times=2))
        with pytest.raises(EffectDeferred):
            sg.send(mail(), intent_key=key)  # this year's: refused twice, nothing sent
        deferred = ledger.get(key)
        assert (deferred.status, deferred.first_dispatched_at) == (EffectStatus.PREPARED, clock())
        clock.advance(timedelta(minutes=5))

        receipt = sg.send(mail(), intent_key=key)  # the job's retry
        assert receipt.status_code == 202
        record = ledger.get(key)
        assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, fake.messages[1].message_id)
        this_years = [a.to_status for a in ledger.store.audit_trail("default", key) if a.at >= record.created_at]
        assert "unknown" not in this_years
    finally:
        ledger.close()
    assert len(fake.messages) == 2  # last year's and this year's
    assert len(fake.sends()) == 4  # last year's, this year's two refused attempts, and its send
