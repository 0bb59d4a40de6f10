"""An operator's decision never contradicts the provider's own evidence, and a refund in doubt is not small.

Evidence can sit on an unknown record without settling it: a webhook recorded while the call was still in
flight (evidence does not settle an in-flight record), or an acceptance still inside its rejection window.
Here it is written to the store directly, which is what those paths leave behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from safe_effects import (
    ApprovalThresholds,
    EffectStatus,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    InvalidInput,
    Operator,
)
from safe_effects.testing import FakeFailure

if TYPE_CHECKING:
    from conftest import Ops

KEY = "order:o_5:collect:v1"
V = EvidenceVerdict


def evidence(ops: Ops, verdict: EvidenceVerdict, *, provider: str = "fake") -> None:
    ops.ledger.store.add_evidence(
        Evidence(
            tenant="default",
            intent_key=KEY,
            provider=provider,
            source="fake_webhook",
            event_id=f"evt_{verdict}_{provider}",
            kind=str(verdict),
            verdict=verdict,
            provider_result_id="fx_1",
            received_at=ops.ledger.clock(),
        )
    )


def resolve(ops: Ops, to: str, version: int, env: dict[str, str] | None = None) -> object:
    extra = ("--provider-id", "fx_1", "--evidence", "dashboard:fx_1") if to == "confirmed" else ()
    return ops.cli(
        "resolve", KEY, "--as", to, "--operator", "carol", "--reason", "checked", "--expect-version", str(version),
        *extra, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("verdict", "refused"),
    [(V.CONFIRMS, "rejected"), (V.ACCEPTS, "rejected"), (V.REJECTS, "confirmed")],
)
def test_a_resolution_the_providers_evidence_contradicts_is_refused(
    ops: Ops, verdict: EvidenceVerdict, refused: str
) -> None:
    record = ops.unknown(KEY, happened=verdict is not V.REJECTS)
    evidence(ops, verdict)
    result = resolve(ops, refused, record.version)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert f"says the provider {verdict}" in result.stderr  # type: ignore[attr-defined]
    assert ops.ledger.get(KEY) == record


@pytest.mark.parametrize("verdict", [V.CONFIRMS, V.ACCEPTS])
def test_a_confirmation_naming_another_object_than_the_providers_event_is_refused(
    ops: Ops, verdict: EvidenceVerdict
) -> None:
    """A helper confirmed an SES send with --provider-id WRONG-ID while its own Send event named the message:
    `show` then gave the wrong id, next to the event's. Both the direct resolution and an approval are held."""
    record = ops.unknown(KEY, amount=500)  # over the threshold below: a resolution of it waits for approval
    evidence(ops, verdict)  # names fx_1
    wrong = ("resolve", KEY, "--as", "confirmed", "--operator", "carol", "--reason", "console", "--expect-version")
    refused = ops.cli(*wrong, str(record.version), "--provider-id", "fx_9", "--evidence", "dashboard")
    assert refused.exit_code == 1
    assert f"cannot be confirmed as 'fx_9': fake_webhook event 'evt_{verdict}_fake' ({verdict}) names 'fx_1'" in (
        refused.stderr
    )
    assert ops.ledger.get(KEY) == record
    big = {"SAFE_EFFECTS_APPROVAL_THRESHOLDS": "usd=1"}
    asked = ops.cli(*wrong, str(record.version), "--provider-id", "fx_9", "--evidence", "dashboard", env=big)
    assert asked.exit_code == 1  # refused before any approval is asked for
    assert ops.cli_json("show", KEY)["approvals"] == []
    assert resolve(ops, "confirmed", record.version).exit_code == 0  # type: ignore[attr-defined]
    assert (ops.ledger.get(KEY).status, ops.ledger.get(KEY).provider_result_id) == ("confirmed", "fx_1")
    decided = ops.ledger.store.audit_trail("default", KEY)[-1].detail  # what was decided, on the trail itself
    assert {name: decided.get(name) for name in ("method", "evidence", "provider_result_id", "operator")} == {
        "method": "operator",
        "evidence": "dashboard:fx_1",
        "provider_result_id": "fx_1",
        "operator": "carol",
    }
    assert len(ops.fake.effects()) == 1


def test_another_providers_event_does_not_block_a_resolution(ops: Ops) -> None:
    record = ops.unknown(KEY, happened=False)
    evidence(ops, V.CONFIRMS, provider="elsewhere")
    assert resolve(ops, "rejected", record.version).exit_code == 0  # type: ignore[attr-defined]
    assert ops.ledger.get(KEY).status == "rejected"
    assert ops.fake.effects() == []


def test_evidence_that_arrives_after_the_request_stops_its_approval(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=250_000)
    big = {"SAFE_EFFECTS_APPROVAL_THRESHOLDS": "usd=100000"}
    assert "pending:" in resolve(ops, "rejected", record.version, env=big).stdout  # type: ignore[attr-defined]
    evidence(ops, V.ACCEPTS)
    approved = ops.cli("approve", KEY, "--operator", "bob")
    assert approved.exit_code == 1
    assert "says the provider accepts" in approved.stderr
    assert ops.ledger.get(KEY) == record
    assert [a["state"] for a in ops.cli_json("show", KEY)["approvals"]] == ["pending"]


@pytest.mark.parametrize("params", [{"amount": 400_000, "currency": "usd"}, {"payment_intent": "fx_1"}])
def test_a_refund_in_doubt_needs_a_second_operator(ops: Ops, params: dict[str, object]) -> None:
    """A compensation's summary carries its amount, or ``unknown`` without one: both are money for the rule."""
    ops.confirmed(KEY)
    operator = Operator(ops.ledger, thresholds=ApprovalThresholds.parse("usd=100000"))
    refund = "order:o_5:refund:v1"
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # the refund happens, its answer is lost
    with pytest.raises(EffectUnknown):
        operator.compensate(
            ops.adapter, original_key=KEY, compensating_key=refund, operation="refund", params=params,
            operator="alice", reason="customer cancelled", expect_version=ops.ledger.get(KEY).version,
        )  # fmt: skip
    doubt = ops.ledger.get(refund)
    assert doubt.summary["amount"] == str(params.get("amount", "unknown"))

    decision = operator.resolve(
        refund, to=EffectStatus.REJECTED, operator="alice", reason="no refund seen", expect_version=doubt.version
    )

    assert decision.pending  # alice alone cannot call a refund in doubt "never happened"
    assert ops.ledger.get(refund) == doubt
    assert len(ops.fake.effects(f"default/{refund}")) == 1


@pytest.mark.parametrize("where", ["kind", "detail"])
def test_evidence_holding_text_no_store_can_hold_is_refused_and_decides_nothing(ops: Ops, where: str) -> None:
    record = ops.unknown(KEY)
    fields = {"kind": "delivered\x00"} if where == "kind" else {"kind": "delivered", "detail": {"note": "\ud800"}}
    bad = Evidence(
        tenant="default",
        intent_key=KEY,
        provider="fake",
        source="fake_webhook",
        event_id="evt_bad",
        verdict=V.CONFIRMS,
        provider_result_id="fx_1",
        received_at=ops.ledger.clock(),
        **fields,
    )
    with pytest.raises(InvalidInput, match=r"evidence 'evt_bad' (at note )?holds a lone surrogate"):
        ops.ledger.record_evidence(bad)
    assert ops.ledger.store.evidence_for("default", KEY) == []
    assert ops.ledger.get(KEY) == record
