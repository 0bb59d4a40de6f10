"""compensate launches the linked compensating intent once and marks the original compensated."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Ops

ADAPTERS = "ops_fake_adapters:adapters"
KEY = "invoice:inv_5:collect:v1"
REFUND = "invoice:inv_5:refund:v1"


def test_compensate_runs_once_and_links_both_records(ops: Ops) -> None:
    ops.confirmed(KEY)
    args = (
        "compensate", KEY, "--compensating-key", REFUND, "--operation", "refund", "--params", '{"amount": 100}',
        "--operator", "alice", "--reason", "customer cancelled", "--adapters", ADAPTERS,
    )  # fmt: skip
    first = ops.cli_json(*args)
    assert first["original"]["status"] == "compensated"
    assert first["original"]["compensated_by"] == REFUND
    assert first["compensation"]["summary"] == {"requested_by": "operator:alice", "reason": "customer cancelled"}
    again = ops.cli_json(*args)
    assert again["from_ledger"] is True
    assert len(ops.fake.effects(f"default/{REFUND}")) == 1


def test_compensate_refuses_an_unconfirmed_original_and_bad_params(ops: Ops) -> None:
    ops.unknown(KEY)
    base = ("compensate", KEY, "--compensating-key", REFUND, "--operation", "refund", "--operator", "alice")
    refused = ops.cli(*base, "--params", "{}", "--reason", "r", "--adapters", ADAPTERS)
    assert refused.exit_code == 1
    assert "illegal transition unknown -> compensated" in refused.stderr
    bad = ops.cli(*base, "--params", "[1]", "--reason", "r", "--adapters", ADAPTERS)
    assert bad.exit_code == 1
    assert "--params must be a JSON object" in bad.stderr
    assert ops.fake.effects(f"default/{REFUND}") == []
