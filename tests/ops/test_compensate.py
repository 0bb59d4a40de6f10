"""compensate launches the linked compensating intent once and marks the original compensated."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from safe_effects import EffectDeferred, Ledger, Operator, RetryPolicy
from safe_effects.testing import FakeFailure

if TYPE_CHECKING:
    from conftest import Ops

ADAPTERS = "ops_fake_adapters:adapters"
KEY = "invoice:inv_5:collect:v1"
REFUND = "invoice:inv_5:refund:v1"


def compensate_args(expect_version: int, compensating_key: str = REFUND) -> tuple[str, ...]:
    """The operator's compensate command for KEY, as a person would type it."""
    return (
        "compensate", KEY, "--compensating-key", compensating_key, "--operation", "refund",
        "--params", '{"amount": 100}', "--operator", "alice", "--reason", "customer cancelled",
        "--adapters", ADAPTERS, "--expect-version", str(expect_version),
    )  # fmt: skip


def test_compensate_runs_once_and_links_both_records(ops: Ops) -> None:
    args = compensate_args(ops.confirmed(KEY).version)
    first = ops.cli_json(*args)
    assert first["original"]["status"] == "compensated"
    assert first["original"]["compensated_by"] == REFUND
    assert first["compensation"]["summary"] == {
        "amount": "100",
        "requested_by": "operator:alice",
        "reason": "customer cancelled",
    }
    again = ops.cli_json(*args)
    assert again["from_ledger"] is True
    assert len(ops.fake.effects(f"default/{REFUND}")) == 1


def test_compensate_refuses_a_record_that_moved_on_since_the_operator_saw_it(ops: Ops) -> None:
    seen = ops.confirmed(KEY).version
    stale = ops.cli(*compensate_args(seen - 1))
    assert stale.exit_code == 1
    assert f"you saw v{seen - 1}: it moved on" in stale.stderr
    assert ops.ledger.get(KEY).status == "confirmed"
    assert ops.fake.effects(f"default/{REFUND}") == []
    assert f"to compensate it, pass --expect-version {seen}" in ops.cli("show", KEY).stdout


def test_compensate_refuses_an_unconfirmed_original_and_bad_params(ops: Ops) -> None:
    seen = ops.unknown(KEY).version
    base = (
        "compensate", KEY, "--compensating-key", REFUND, "--operation", "refund", "--operator", "alice",
        "--expect-version", str(seen),
    )  # fmt: skip
    refused = ops.cli(*base, "--params", "{}", "--reason", "r", "--adapters", ADAPTERS)
    assert refused.exit_code == 1
    assert "illegal transition unknown -> compensated" in refused.stderr
    bad = ops.cli(*base, "--params", "[1]", "--reason", "r", "--adapters", ADAPTERS)
    assert bad.exit_code == 1
    assert "--params must be a JSON object" in bad.stderr
    # nested past Python's depth, and a number past 4,300 digits: an untyped error line before
    for unreadable, named in (("[" * 100_000, "RecursionError"), ('{"amount": ' + "9" * 5000 + "}", "ValueError")):
        refused = ops.cli(*base, "--params", unreadable, "--reason", "r", "--adapters", ADAPTERS)
        assert refused.exit_code == 1
        assert f"error [invalid_input]: --params cannot be read: {named}" in refused.stderr
    assert ops.fake.effects(f"default/{REFUND}") == []


def test_the_same_compensation_after_a_lost_answer_runs_again_with_the_version_first_seen(ops: Ops) -> None:
    """Naming the compensation on the original moves its version; the operator's same command still settles it."""
    seen = ops.confirmed(KEY).version
    args = compensate_args(seen)
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # the refund happened, its answer was lost
    lost = ops.cli(*args)
    assert lost.exit_code != 0
    held = ops.ledger.get(KEY)
    assert (held.status, held.compensated_by, held.version) == ("confirmed", REFUND, seen + 1)
    other = ops.cli(*compensate_args(seen + 1, "invoice:inv_5:refund:v2"))  # at the current version
    assert other.exit_code == 1
    assert f"compensation '{REFUND}' holds it (unknown)" in other.stderr

    again = ops.cli_json(*args)

    assert again["original"]["status"] == "compensated"
    assert len(ops.fake.effects(f"default/{REFUND}")) == 1
    assert ops.fake.effects("default/invoice:inv_5:refund:v2") == []


def test_the_same_compensation_again_refuses_a_version_never_shown(ops: Ops) -> None:
    """A rerun may name any version from the confirmed one to the current one: never a later or earlier one."""
    seen = ops.confirmed(KEY).version
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # the refund happened, its answer was lost
    assert ops.cli(*compensate_args(seen)).exit_code == 1
    held = ops.ledger.get(KEY)
    assert (held.status, held.compensated_by, held.version) == ("confirmed", REFUND, seen + 1)
    for never_shown in (999, held.version + 1, seen - 1):
        refused = ops.cli(*compensate_args(never_shown))
        assert refused.exit_code == 1
        assert f"you saw v{never_shown}: it moved on" in refused.stderr
        assert ops.ledger.get(KEY) == held
        assert ops.ledger.get(REFUND).status == "unknown"
    current = ops.cli_json(*compensate_args(held.version))  # the version `show` prints now is fine too
    assert current["original"]["status"] == "compensated"
    done = ops.ledger.get(KEY)
    assert ops.cli(*compensate_args(done.version + 1)).exit_code == 1
    assert ops.cli_json(*compensate_args(seen))["from_ledger"] is True  # answered from the ledger
    assert ops.ledger.get(KEY) == done
    assert len(ops.fake.effects(f"default/{REFUND}")) == 1


def test_a_compensation_sent_again_by_another_operator_keeps_who_asked_first_on_the_trail(ops: Ops) -> None:
    """The second QA pass: a deferred refund re-run by another operator replaced the summary's requested_by and
    reason (a claim records the summary of what it sends), and nothing kept the first operator's."""
    ledger = Ledger(ops.ledger.store, retry=RetryPolicy(max_attempts=2, initial_wait=0.0, max_wait=0.0))
    operator = Operator(ledger)
    original = ops.confirmed(KEY)
    refund = {"operation": "refund", "original_key": KEY, "compensating_key": REFUND, "params": {"amount": 100}}
    ops.fake.fail_next(FakeFailure.REFUSED, FakeFailure.REFUSED)  # both attempts refused: deferred, nothing sent
    with pytest.raises(EffectDeferred):
        operator.compensate(ops.adapter, **refund, operator="alice", reason="ticket 1", expect_version=original.version)
    again = ledger.get(KEY)
    operator.compensate(ops.adapter, **refund, operator="bob", reason="ticket 1, again", expect_version=again.version)
    sent = ledger.get(REFUND)
    assert (sent.status, sent.summary["requested_by"], sent.summary["reason"]) == (
        "confirmed",
        "operator:bob",
        "ticket 1, again",
    )
    claims = [a for a in ledger.store.audit_trail("default", REFUND) if a.to_status == "in_flight"]
    assert [a.detail.get("summary_before", {}).get("requested_by") for a in claims] == ["operator:alice"]
    assert claims[0].detail["summary_before"]["reason"] == "ticket 1"
    assert len([e for e in ops.fake.effects() if e.key.endswith(REFUND)]) == 1  # the refund went out once


def test_a_compensation_rejected_by_hand_is_looked_up_before_another_replaces_it(ops: Ops) -> None:
    """Found by an operator audit: a refund whose answer was lost, rejected by an operator who skipped the lookup
    (`--no-lookup`), was replaced by a second refund: the customer was refunded twice. The earlier one is now
    looked up first, and found, it must be corrected to confirmed instead."""
    seen = ops.confirmed(KEY).version
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # the refund happened, its answer was lost
    assert ops.cli(*compensate_args(seen)).exit_code == 1
    refund = ops.ledger.get(REFUND)
    rejected = ops.cli(
        "resolve", REFUND, "--as", "rejected", "--operator", "bob", "--reason", "not in the dashboard",
        "--expect-version", str(refund.version), "--no-lookup",
    )  # fmt: skip
    assert rejected.exit_code == 0, rejected.output
    held = ops.ledger.get(KEY)

    second = ops.cli(*compensate_args(held.version, "invoice:inv_5:refund:v2"))

    assert second.exit_code == 1
    assert f"compensation '{REFUND}' was rejected by hand, but a lookup (search) finds it" in second.stderr
    assert ops.ledger.get(KEY) == held
    assert len(ops.fake.effects(f"default/{REFUND}")) == 1
    assert ops.fake.effects("default/invoice:inv_5:refund:v2") == []
