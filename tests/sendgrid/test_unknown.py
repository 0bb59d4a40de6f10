"""A lost 202 never becomes a resend: the intent stays unknown until evidence or a lookup settles it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from safe_effects import EffectRecord, EffectRejected, EffectStatus, EffectUnknown, Ledger, LookupStatus
from safe_effects.testing import Fault
from sendgrid_safe import LedgerResponse, SendGridAPIClient, ingest_events
from sendgrid_safe.testing import FakeSendGrid

S = EffectStatus
Record = Callable[[str], EffectRecord]


def _lose_the_202(sg: SendGridAPIClient, fake: FakeSendGrid, key: str, message: Any) -> None:
    fake.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        sg.send(message, intent_key=key)


def _retry_stays_unknown(sg: SendGridAPIClient, fake: FakeSendGrid, key: str, message: Any) -> None:
    with pytest.raises(EffectUnknown):
        sg.send(message, intent_key=key)
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)  # asked again, sent nothing


def test_lost_202_then_webhook_confirms_without_a_resend(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    fake.activity_visible = False  # activity search lags: a lookup finds nothing yet
    _lose_the_202(sg, fake, key, mail())
    _retry_stays_unknown(sg, fake, key, mail())
    assert ledger.get(key).status is S.UNKNOWN

    body, headers = fake.webhook_request(fake.events(fake.messages[0]))
    report = ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
    assert (report.recorded, report.malformed) == (2, 0)

    settled = ledger.get(key)
    assert settled.status is S.CONFIRMED
    assert settled.provider_result_id == fake.messages[0].message_id
    assert settled.resolution is not None
    assert settled.resolution.method == "evidence:sendgrid_webhook"
    answer = sg.send(mail(), intent_key=key)
    assert isinstance(answer, LedgerResponse)
    assert answer.headers["X-Message-Id"] == fake.messages[0].message_id
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)


@pytest.mark.parametrize("kind", ["delivered", "deferred", "bounce"])
def test_lost_202_then_any_delivery_attempt_alone_confirms_it(
    kind: str, *, sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """A deferral or a bounce means SendGrid tried to deliver: the mail went out, no drop can follow, and the
    intent is confirmed at once (a 'processed' alone waits out the rejection window)."""
    fake.activity_visible = False  # activity search lags: a lookup finds nothing yet
    _lose_the_202(sg, fake, key, mail())

    body, headers = fake.webhook_request(fake.events(fake.messages[0], kinds=[kind]))
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == 1

    settled = ledger.get(key)
    assert (settled.status, settled.provider_result_id) == (S.CONFIRMED, fake.messages[0].message_id)
    assert settled.resolution is not None
    assert settled.resolution.method == "evidence:sendgrid_webhook"
    assert isinstance(sg.send(mail(), intent_key=key), LedgerResponse)
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)


def test_lost_202_then_processed_confirms_nothing_yet_and_a_later_drop_rejects_it(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """'processed' says SendGrid took the message, not that it went out: a drop may follow in a later batch, so
    the intent waits (a retry sends nothing) and the drop then rejects it."""
    fake.activity_visible = False
    _lose_the_202(sg, fake, key, mail())
    body, headers = fake.webhook_request(fake.events(fake.messages[0], kinds=["processed"]))
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == 1
    assert ledger.get(key).status is S.UNKNOWN
    _retry_stays_unknown(sg, fake, key, mail())

    body, headers = fake.webhook_request(fake.events(fake.messages[0], kinds=["dropped"], reason="Bounced Address"))
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == 1
    assert ledger.get(key).status is S.REJECTED
    with pytest.raises(EffectRejected):
        sg.send(mail(), intent_key=key)
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)


def test_lost_202_then_the_activity_api_confirms_it(
    sg: SendGridAPIClient, fake: FakeSendGrid, record: Record, key: str, mail: Any
) -> None:
    _lose_the_202(sg, fake, key, mail())
    answer = sg.send(mail(), intent_key=key)
    assert isinstance(answer, LedgerResponse)
    settled = record(key)
    assert (settled.status, settled.provider_result_id) == (S.CONFIRMED, fake.messages[0].message_id)
    assert settled.resolution is not None
    assert settled.resolution.method == "lookup:activity_api"
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)
    assert len(fake.requests("GET", "/v3/messages")) == 1


def test_without_evidence_it_stays_unknown_and_is_listed(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    fake.activity_enabled = False  # no paid add-on: every search is a 403
    sg.adapter.lookup_min_interval = 0.0
    _lose_the_202(sg, fake, key, mail())
    for _ in range(3):
        _retry_stays_unknown(sg, fake, key, mail())
    assert sg.reconcile(intent_key=key).status is S.UNKNOWN
    assert ledger.get(key).status is S.UNKNOWN
    failed = sg.adapter.lookup(ledger.get(key))  # an error, not "not indexed yet": the reconciler's alert sees it
    assert (failed.status, failed.method, failed.detail) == (
        LookupStatus.INCONCLUSIVE,
        "lookup_error",
        {"error": "http_403"},
    )
    unknown = ledger.store.list_by_status([S.UNKNOWN], provider="sendgrid", limit=10_000)
    assert key in [r.intent_key for r in unknown]
    assert len(fake.requests("GET", "/v3/messages")) == 5


def test_the_activity_rate_limit_is_kept_locally(
    sg: SendGridAPIClient, fake: FakeSendGrid, record: Record, key: str, mail: Any
) -> None:
    fake.activity_visible = False
    _lose_the_202(sg, fake, key, mail())
    _retry_stays_unknown(sg, fake, key, mail())
    _retry_stays_unknown(sg, fake, key, mail())
    assert len(fake.requests("GET", "/v3/messages")) == 1  # the second lookup came within 10 s
    assert record(key).status is S.UNKNOWN


def test_a_dropped_single_recipient_message_is_rejected(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    fake.activity_visible = False
    _lose_the_202(sg, fake, key, mail())
    events = fake.events(fake.messages[0], kinds=["dropped"], reason="Bounced Address")
    body, headers = fake.webhook_request(events)
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == 1
    assert ledger.get(key).status is S.REJECTED
    with pytest.raises(EffectRejected):
        sg.send(mail(), intent_key=key)
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)


@pytest.mark.parametrize(
    ("reason", "stored"),
    [("Bounced Address", "Bounced Address"), ("Bounced Address jane.doe@example.com", "unlisted")],
)
def test_a_drop_reason_is_kept_only_as_sendgrid_words_it(
    reason: str, stored: str, *, sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """The evidence keeps ids and SendGrid's fixed phrases: a reason that quotes an address (from an unsigned
    poster, or a changed SendGrid) is stored as ``unlisted``, never as the address. The drop still decides."""
    fake.activity_visible = False
    _lose_the_202(sg, fake, key, mail())
    body, headers = fake.webhook_request(fake.events(fake.messages[0], kinds=["dropped"], reason=reason))
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == 1
    (evidence,) = ledger.store.evidence_for("default", key)
    assert evidence.detail["reason"] == stored
    assert "@" not in json.dumps(evidence.detail)
    assert ledger.get(key).status is S.REJECTED
    assert fake.effect_count() == 1  # the 202 that was lost: nothing resent


@pytest.mark.parametrize("copy_to", ["to", "cc", "bcc"])
def test_a_drop_for_one_of_several_recipients_decides_nothing(
    copy_to: str, *, sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """The second recipient may be a cc or a bcc: its copy still goes when the first is dropped."""
    fake.activity_visible = False
    message = mail(to="a@example.com").get()
    message["personalizations"][0].setdefault(copy_to, []).append({"email": "b@example.com"})
    _lose_the_202(sg, fake, key, message)
    first_only = fake.events(fake.messages[0], kinds=["dropped"], reason="Unsubscribed Address")[:1]
    body, headers = fake.webhook_request(first_only)
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == 1
    assert ledger.get(key).status is S.UNKNOWN
    body, headers = fake.webhook_request(fake.events(fake.messages[0], kinds=["delivered"])[1:])
    ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
    assert ledger.get(key).status is S.CONFIRMED
    assert fake.effect_count() == 1


@pytest.mark.parametrize("answered", ["by another host", "after SendGrid took it"])
def test_a_success_status_without_sendgrids_202_and_message_id_is_unknown_not_confirmed(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any, answered: str
) -> None:
    """A wrong host, a proxy or a captive portal (a 302 urllib follows as a GET) answered 200 without an
    X-Message-Id: the intent was confirmed with no message id, the email never sent and never to be sent."""
    page = "<html>please log in</html>"
    fault = Fault.status_code(200, body=page) if answered == "by another host" else Fault.status_after_commit(200)
    fake.inject(fault)
    with pytest.raises(EffectUnknown) as lost:
        sg.send(mail(), intent_key=key)
    assert "answered HTTP 200 without an X-Message-Id" in str(lost.value.__cause__)
    recorded = ledger.get(key)
    assert (recorded.status, recorded.last_error_code, recorded.provider_result_id) == (
        S.UNKNOWN,
        "unexpected_answer",
        None,
    )
    if answered == "by another host":
        assert (len(fake.sends()), fake.effect_count()) == (1, 0)
        with pytest.raises(EffectUnknown):  # never resent: the host may have been SendGrid's
            sg.send(mail(), intent_key=key)
        assert (len(fake.sends()), fake.effect_count()) == (1, 0)
    else:  # the retry's lookup finds the message SendGrid took: confirmed, never sent again
        assert sg.send(mail(), intent_key=key).from_ledger
        assert (len(fake.sends()), fake.effect_count()) == (1, 1)
        assert ledger.get(key).provider_result_id == fake.messages[0].message_id
