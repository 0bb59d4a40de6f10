"""Settling by hand, recording evidence, reconciling: bad input is refused, typed, and writes nothing.

Found by driving the public API with odd values: each of these used to write part of its change and then fail,
or fail deep inside one store's driver (PostgreSQL) while the other stored what no JSON reader takes back
(SQLite). Every test runs on both stores and checks the record, its audit trail, its evidence and the fake.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from safe_effects import (
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    IllegalTransition,
    InvalidInput,
    InvalidIntentKey,
    Ledger,
    Operator,
    Resolution,
    RetryPolicy,
    UndigestibleRequest,
    UnknownTenant,
)
from safe_effects._settle_checks import refuse_contradicted
from safe_effects.testing import (
    FakeFailure,
    GenericFakeAdapter,
    GenericFakeProvider,
    RecordingObserver,
    generic_contract,
)

KEY = "invoice:inv_7:collect:v1"
CHARGE = EffectRequest(operation="charge", params={"amount": 100})
BY_HAND = Resolution(method="operator", operator="alice", reason="seen")


class World:
    """A ledger holding one unknown charge (the fake took it, the answer was lost), and the fake."""

    def __init__(self, ledger: Ledger, tmp_path: Path) -> None:
        self.ledger = ledger
        self.fake = GenericFakeProvider(tmp_path / "fake.db")
        self.adapter = GenericFakeAdapter(self.fake, generic_contract())
        self.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
        with pytest.raises(EffectUnknown):
            ledger.execute(self.adapter, CHARGE, intent_key=KEY)
        self.record = ledger.get(KEY)
        self.trail = ledger.store.audit_trail("default", KEY)

    def unchanged(self) -> None:
        assert self.ledger.get(KEY) == self.record
        assert self.ledger.store.audit_trail("default", KEY) == self.trail
        assert self.ledger.store.evidence_for("default", KEY) == []
        assert len(self.fake.effects()) == 1


@pytest.fixture
def world(open_ledger: Callable[..., Ledger], tmp_path: Path) -> World:
    ledger = open_ledger(retry=RetryPolicy(initial_wait=0.0, max_wait=0.0, max_attempts=1))
    return World(ledger, tmp_path)


@pytest.mark.parametrize("to", ["compensated", "prepared", "in_flight", "unknown", "settled", 3])
def test_settle_moves_an_unknown_intent_only_to_confirmed_or_rejected(world: World, to: Any) -> None:
    with pytest.raises(InvalidInput, match="settled as confirmed or rejected"):
        world.ledger.settle(world.record, to, resolution=BY_HAND, actor="operator:alice")
    world.unchanged()


def test_settle_takes_the_status_as_text_like_the_enum(world: World) -> None:
    settled = world.ledger.settle(world.record, "rejected", resolution=BY_HAND, actor="operator:alice")  # type: ignore[arg-type]
    assert settled.status is EffectStatus.REJECTED
    assert world.ledger.get(KEY).status is EffectStatus.REJECTED


def test_settle_refuses_a_record_that_is_not_unknown(world: World) -> None:
    confirmed = world.ledger.settle(world.record, EffectStatus.CONFIRMED, resolution=BY_HAND, actor="a")
    with pytest.raises(IllegalTransition, match=r"confirmed -> rejected .*only an unknown intent is settled"):
        world.ledger.settle(confirmed, EffectStatus.REJECTED, resolution=BY_HAND, actor="a")
    assert world.ledger.get(KEY) == confirmed


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"resolution": Resolution(method="operator", reason="seen \ud800")}, "the resolution at reason holds a lone"),
        (
            {"resolution": Resolution(method="operator", reason="seen\x00")},
            "the resolution holds a lone surrogate or NUL",
        ),
        ({"detail": {"ratio": math.nan}}, "the audit detail at ratio is nan"),
        ({"detail": {"seen": datetime(2026, 1, 1, tzinfo=UTC)}}, "the audit detail at seen is a datetime"),
        ({"detail": {"raw": b"\xff"}}, "the audit detail at raw is a bytes"),
        ({"response_digest": "sha256:\x00"}, "response_digest holds a lone surrogate or NUL"),
        # of the wrong type: each was a raw TypeError or AttributeError from deep inside the write
        ({"actor": 5}, "actor must be a non-blank str naming who settles it, got 5"),
        ({"actor": ""}, "actor must be a non-blank str"),  # was written as the audit row's actor
        ({"actor": None}, "actor must be a non-blank str"),
        ({"provider_result_id": 5}, "provider_result_id must be a str or None, got int"),
        ({"response_digest": 5}, "response_digest must be a str or None, got int"),
        ({"resolution": {"method": "operator"}}, "resolution must be a Resolution, got dict"),
        ({"resolution": None}, "resolution must be a Resolution, got NoneType"),
        ({"detail": [["k", 1]]}, "detail must be a mapping or None, got list"),
        ({"approval": "x"}, "approval must be an Approval or None, got str"),
    ],
    ids=[
        "surrogate reason",
        "nul reason",
        "nan detail",
        "datetime detail",
        "bytes detail",
        "nul digest",
        "int actor",
        "blank actor",
        "no actor",
        "int provider id",
        "int digest",
        "dict resolution",
        "no resolution",
        "list detail",
        "str approval",
    ],
)
def test_settle_refuses_values_no_store_keeps_and_writes_nothing(
    world: World, change: dict[str, Any], named: str
) -> None:
    call: dict[str, Any] = {"resolution": BY_HAND, "actor": "operator:alice", **change}
    with pytest.raises(InvalidInput, match=named):
        world.ledger.settle(world.record, EffectStatus.CONFIRMED, **call)
    world.unchanged()


def test_settle_refuses_what_is_no_record_by_name(world: World) -> None:
    with pytest.raises(InvalidInput, match="record must be an EffectRecord"):
        world.ledger.settle(dict(world.record), EffectStatus.CONFIRMED, resolution=BY_HAND, actor="a")  # type: ignore[arg-type]
    world.unchanged()


def evidence(**fields: Any) -> Evidence:
    values: dict[str, Any] = {
        "tenant": "default", "intent_key": KEY, "provider": "fake", "source": "events", "event_id": "e1",
        "kind": "delivered", "verdict": EvidenceVerdict.CONFIRMS, "provider_result_id": "fx_1",
        "received_at": datetime.now(UTC), **fields,
    }  # fmt: skip
    return Evidence(**values)


def test_settle_refuses_a_rejection_the_providers_own_events_contradict(world: World) -> None:
    """A caller's own tooling settling by hand gets the operator's check: a rejection after the provider said it
    took the request would be sent again under a new key (the misuse review: two emails)."""
    assert world.ledger.record_evidence(evidence(verdict=EvidenceVerdict.ACCEPTS, kind="processed")) is True
    assert world.ledger.get(KEY).status is EffectStatus.UNKNOWN  # an acceptance waits out its rejection window
    accepted = r"cannot be resolved as rejected: events event 'e1' \(processed\) says the provider accepts"
    with pytest.raises(InvalidInput, match=accepted):
        world.ledger.settle(world.record, EffectStatus.REJECTED, resolution=BY_HAND, actor="operator:alice")
    with pytest.raises(InvalidInput, match="cannot be confirmed as 'fx_9': events event 'e1'"):
        world.ledger.settle(
            world.record, EffectStatus.CONFIRMED, resolution=BY_HAND, actor="operator:alice", provider_result_id="fx_9"
        )
    assert world.ledger.get(KEY) == world.record
    assert world.ledger.store.audit_trail("default", KEY) == world.trail
    assert len(world.fake.effects()) == 1


def test_a_delivery_on_file_refuses_a_rejection_even_beside_a_drop(world: World) -> None:
    """Found by an operator audit: a mail to two recipients, one dropped and one delivered, both reported while the
    call was in flight. The drop waived every other event, so an operator could reject it, and the job's send
    under a new key mailed the delivered recipient twice. Only an acceptance is waived by a refusal after it
    (SES's Send, then its Reject)."""
    dropped = evidence(event_id="e-drop", verdict=EvidenceVerdict.REJECTS, kind="dropped")
    delivered = evidence(event_id="e-deliv", verdict=EvidenceVerdict.CONFIRMS, kind="delivered")
    with pytest.raises(InvalidInput, match=r"events event 'e-deliv' \(delivered\) says the provider confirms"):
        refuse_contradicted(world.record, EffectStatus.REJECTED, None, [dropped, delivered])
    sent = evidence(event_id="e-send", verdict=EvidenceVerdict.ACCEPTS, kind="Send")
    refuse_contradicted(world.record, EffectStatus.REJECTED, None, [sent, dropped])  # SES: Send, then Reject


def test_settle_refuses_another_tenants_record_before_reading_its_evidence(world: World) -> None:
    assert world.ledger.record_evidence(evidence(verdict=EvidenceVerdict.ACCEPTS, kind="processed")) is True
    acme_only = Ledger(world.ledger.store, tenants={"acme"})
    with pytest.raises(UnknownTenant):  # not an InvalidInput quoting the default tenant's events
        acme_only.settle(world.record, EffectStatus.REJECTED, resolution=BY_HAND, actor="operator:alice")
    assert world.ledger.get(KEY) == world.record


@pytest.mark.parametrize(
    ("fields", "error", "named"),
    [
        ({"detail": {"ratio": math.inf}}, InvalidInput, "the detail of evidence 'e1' at ratio is inf"),
        ({"detail": {"raw": b"\xff"}}, InvalidInput, "the detail of evidence 'e1' at raw is a bytes"),
        ({"detail": {"what": object()}}, InvalidInput, "the detail of evidence 'e1' at what is a object"),
        ({"intent_key": "garbage"}, InvalidIntentKey, "garbage"),
        ({"event_id": ""}, InvalidInput, "evidence event_id must not be blank"),
        ({"source": " "}, InvalidInput, "evidence source must not be blank"),
        ({"kind": ""}, InvalidInput, "evidence kind must not be blank"),
        ({"event_id": "x" * 1001}, InvalidInput, r"evidence event_id takes at most 1000 bytes \(UTF-8\)"),
        ({"provider": "é" * 101}, InvalidInput, r"evidence provider takes at most 200 bytes \(UTF-8\)"),
        (
            {"received_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))},
            InvalidInput,
            "received_at has no UTC time within the years 1 to 9999",  # was a raw OverflowError
        ),
    ],
    ids=[
        "inf detail",
        "bytes detail",
        "object detail",
        "malformed intent key",
        # a blank id made the next blank one a duplicate, dropped; a long one failed PostgreSQL's unique index
        # as LedgerUnavailable, an outage a webhook retries for ever
        "blank event id",
        "blank source",
        "blank kind",
        "long event id",
        "long provider",
        "no utc instant",
    ],
)
def test_evidence_that_no_store_keeps_is_refused_and_settles_nothing(
    world: World, fields: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        world.ledger.record_evidence(evidence(**fields))
    world.unchanged()


def test_reconcile_refuses_an_adapter_of_another_provider(world: World, tmp_path: Path) -> None:
    other = GenericFakeAdapter(GenericFakeProvider(tmp_path / "other.db"), generic_contract())
    other.provider = "elsewhere"
    with pytest.raises(InvalidInput, match="was sent to 'fake': a 'elsewhere' adapter cannot look it up"):
        world.ledger.reconcile(other, intent_key=KEY)
    world.unchanged()


def test_operator_resolve_takes_the_status_as_text_and_checks_it_the_same(world: World) -> None:
    """A plain "confirmed" used to skip the provider-id and evidence checks, write, then fail."""
    operator = Operator(world.ledger)
    with pytest.raises(InvalidInput, match="to confirm, the provider's id"):
        operator.resolve(KEY, to="confirmed", operator="alice", reason="r", expect_version=world.record.version)  # type: ignore[arg-type]
    world.unchanged()
    decision = operator.resolve(
        KEY, to="confirmed", operator="alice", reason="r", expect_version=world.record.version,  # type: ignore[arg-type]
        provider_result_id="fx_1", evidence="dashboard:fx_1",
    )  # fmt: skip
    assert decision.record.status is EffectStatus.CONFIRMED
    assert world.ledger.get(KEY).provider_result_id == "fx_1"


def test_a_tenants_string_is_refused_not_read_as_letters(store_url: str) -> None:
    with pytest.raises(InvalidInput, match="tenants must be a collection of tenant ids, not the str 'acme'"):
        Ledger.open(store_url, tenants="acme")


def test_an_integer_python_cannot_write_is_undigestible_and_nothing_is_recorded(world: World) -> None:
    huge = EffectRequest(operation="charge", params={"amount": 10**5000})
    with pytest.raises(UndigestibleRequest, match=r"request parameter params\.amount is an integer with more digits"):
        world.ledger.execute(world.adapter, huge, intent_key="invoice:inv_8:collect:v1")
    assert world.ledger.store.get("default", "invoice:inv_8:collect:v1") is None
    assert len(world.fake.effects()) == 1


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ({"operator": 5}, "operator identity .* must be text, got int"),
        ({"reason": ["seen"]}, "a reason .* must be text, got list"),
        ({"evidence": 7}, "the evidence reference .* must be text, got int"),
        # "2" compared unequal to 2 and read "you saw v2: it moved on"; 2.0 was taken as the version
        ({"expect_version": "2"}, "expect_version must be an int of 1 or more, got '2'"),
        ({"expect_version": 2.0}, "expect_version must be an int of 1 or more, got 2.0"),
    ],
)
def test_operator_values_that_are_not_text_are_refused_typed(world: World, call: dict[str, Any], named: str) -> None:
    values = {"to": "rejected", "operator": "alice", "reason": "seen", "expect_version": world.record.version, **call}
    with pytest.raises(InvalidInput, match=named):
        Operator(world.ledger).resolve(KEY, **values)
    world.unchanged()


def test_a_compensation_whose_params_are_not_an_object_is_refused_before_anything(world: World) -> None:
    confirmed = world.ledger.settle(world.record, EffectStatus.CONFIRMED, resolution=BY_HAND, actor="a")
    with pytest.raises(InvalidInput, match="a compensation's params must be a JSON object, got list"):
        Operator(world.ledger).compensate(
            world.adapter, original_key=KEY, compensating_key="invoice:inv_7:refund:v1", operation="refund",
            params=[1], operator="alice", reason="duplicate", expect_version=confirmed.version,  # type: ignore[arg-type]
        )  # fmt: skip
    assert world.ledger.get(KEY) == confirmed
    assert world.ledger.store.get("default", "invoice:inv_7:refund:v1") is None
    assert len(world.fake.effects()) == 1


@pytest.mark.parametrize(
    ("params", "version", "named"),
    [
        ({"amount": 10**5000}, None, "a compensation's amount must be under 1e\\+30"),  # str() of it was a ValueError
        ({"amount": 100}, "1", "expect_version must be an int of 1 or more, got '1'"),
    ],
)
def test_a_compensation_amount_or_version_it_cannot_use_is_refused_before_anything(
    world: World, params: dict[str, Any], version: object, named: str
) -> None:
    confirmed = world.ledger.settle(world.record, EffectStatus.CONFIRMED, resolution=BY_HAND, actor="a")
    with pytest.raises(InvalidInput, match=named):
        Operator(world.ledger).compensate(
            world.adapter, original_key=KEY, compensating_key="invoice:inv_7:refund:v1", operation="refund",
            params=params, operator="alice", reason="duplicate",
            expect_version=confirmed.version if version is None else version,  # type: ignore[arg-type]
        )  # fmt: skip
    assert world.ledger.get(KEY) == confirmed
    assert world.ledger.store.get("default", "invoice:inv_7:refund:v1") is None
    assert len(world.fake.effects()) == 1


def test_only_the_records_own_provider_can_contradict_a_confirmed_effect(world: World) -> None:
    world.ledger.settle(world.record, EffectStatus.CONFIRMED, resolution=BY_HAND, actor="a")
    events = RecordingObserver()
    world.ledger.observer = events
    refused = {"verdict": EvidenceVerdict.REJECTS, "kind": "dropped"}
    assert world.ledger.record_evidence(evidence(provider="elsewhere", event_id="e-other", **refused))
    assert [name for name, _ in events.events] == []  # another provider's event decides nothing here
    assert world.ledger.record_evidence(evidence(event_id="e-own", **refused))
    assert [(name, labels["kind"]) for name, labels in events.events] == [("contradicting_evidence", "dropped")]
    assert world.ledger.get(KEY).status is EffectStatus.CONFIRMED


def test_evidence_that_a_rejected_intent_acted_is_raised_as_an_unrecorded_effect(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator resolved the intent rejected, then the provider's answer or event says it acted: money may
    have moved where the ledger says none did. Only its own provider's confirmation counts: an acceptance (SES
    Send, SendGrid processed) may come with the refusal that rejected it."""
    rejected = world.ledger.settle(world.record, EffectStatus.REJECTED, resolution=BY_HAND, actor="a")
    events = RecordingObserver()
    world.ledger.observer = events
    assert world.ledger.record_evidence(evidence(provider="elsewhere", event_id="e-other"))
    assert world.ledger.record_evidence(evidence(event_id="e-refused", verdict=EvidenceVerdict.REJECTS))
    assert world.ledger.record_evidence(evidence(event_id="e-accepts", verdict=EvidenceVerdict.ACCEPTS))
    assert events.events == []
    assert world.ledger.record_evidence(evidence(event_id="e-confirms"))

    assert [(name, labels["status"], labels["source"]) for name, labels in events.events] == [
        ("unrecorded_effect", "rejected", "events")
    ]
    assert "is rejected, but events evidence 'e-confirms' says the provider acted on it" in caplog.text
    assert world.ledger.get(KEY) == rejected  # nothing here can undo it: it is raised, not rewritten
    assert len(world.fake.effects()) == 1


def test_a_late_answer_naming_a_second_object_beside_the_confirmed_one_is_an_unrecorded_effect(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A late worker's answer names another object than the one confirmed: the intent may have acted twice.
    The same object again, or a webhook's id (another id space), is nothing to raise."""
    confirmed = world.ledger.settle(
        world.record, EffectStatus.CONFIRMED, resolution=BY_HAND, actor="a", provider_result_id="fx_1"
    )
    events = RecordingObserver()
    world.ledger.observer = events
    late = {"source": "late_response", "kind": "confirmed"}
    assert world.ledger.record_evidence(evidence(event_id="late-same", provider_result_id="fx_1", **late))
    assert world.ledger.record_evidence(evidence(event_id="hook-other", provider_result_id="msg_9"))
    assert events.events == []
    assert world.ledger.record_evidence(evidence(event_id="late-other", provider_result_id="fx_2", **late))

    assert [(name, labels["status"]) for name, labels in events.events] == [("unrecorded_effect", "confirmed")]
    assert "names 'fx_2' beside the recorded 'fx_1'" in caplog.text
    assert world.ledger.get(KEY) == confirmed


def test_a_rejected_intent_is_corrected_only_to_confirmed_and_only_on_its_providers_evidence(world: World) -> None:
    """An operator rejected it; nothing from the provider says it acted: no correction (it would hide that
    nothing happened), by the operator API or the ledger's own. Rejected again is no correction at all."""
    rejected = world.ledger.settle(world.record, EffectStatus.REJECTED, resolution=BY_HAND, actor="a")
    assert world.ledger.record_evidence(evidence(provider="elsewhere", event_id="e-other"))  # not its provider
    operator = Operator(world.ledger)
    confirm = {"operator": "bob", "reason": "x", "expect_version": rejected.version, "provider_result_id": "fx_1"}
    with pytest.raises(InvalidInput, match="no evidence from fake says it acted"):
        operator.resolve(KEY, to=EffectStatus.CONFIRMED, evidence="dashboard", **confirm)
    with pytest.raises(IllegalTransition, match="corrected only on its provider's own evidence"):
        world.ledger.settle(rejected, EffectStatus.CONFIRMED, resolution=BY_HAND, actor="a")
    with pytest.raises(InvalidInput, match="is rejected: only an unknown intent can be resolved"):
        operator.resolve(KEY, to=EffectStatus.REJECTED, operator="bob", reason="x", expect_version=rejected.version)
    assert world.ledger.get(KEY) == rejected

    assert world.ledger.record_evidence(evidence(event_id="e-own"))  # the provider's own confirmation
    corrected = operator.resolve(KEY, to=EffectStatus.CONFIRMED, evidence="e-own", **confirm).record
    assert (corrected.status, corrected.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert world.ledger.get(KEY) == corrected


def test_a_retry_of_an_intent_a_person_rejected_says_who_rejected_it_not_the_provider(world: World) -> None:
    world.ledger.settle(world.record, EffectStatus.REJECTED, resolution=BY_HAND, actor="operator:alice")
    with pytest.raises(EffectRejected, match=r"was rejected by operator alice \(seen\)$"):
        world.ledger.execute(world.adapter, CHARGE, intent_key=KEY)
    assert len(world.fake.effects()) == 1  # the one the lost answer was about; nothing sent again
