"""list, show and lookup: what an operator sees, as tables and JSON, changing nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from safe_effects import (
    CrashPlan,
    CrashPoint,
    EffectRequest,
    EffectStatus,
    Evidence,
    EvidenceVerdict,
    Ledger,
    Operator,
    SimulatedCrash,
)
from safe_effects.testing import FakeClock

if TYPE_CHECKING:
    from conftest import Ops

ADAPTERS = "ops_fake_adapters:adapters"

KEY = "invoice:inv_1:collect:v1"
LIVE = "invoice:inv_live:collect:v1"


def test_list_shows_unknowns_oldest_first_with_summary(ops: Ops) -> None:
    ops.unknown("invoice:inv_1:collect:v1", amount=5000)
    ops.unknown("invoice:inv_2:collect:v1", happened=False)
    ops.confirmed("invoice:inv_3:collect:v1")
    listed = ops.cli_json("list")
    assert [r["intent_key"] for r in listed] == ["invoice:inv_1:collect:v1", "invoice:inv_2:collect:v1"]
    assert listed[0]["summary"] == {"amount": "5000", "currency": "usd"}
    assert listed[0]["age_seconds"] >= 0
    everything = ops.cli_json("list", "--status", "unknown", "--status", "confirmed")
    assert len(everything) == 3
    table = ops.cli("list")
    assert table.exit_code == 0
    assert "2 intent(s)" in table.stdout
    assert "--limit shows more" not in table.stdout
    assert "amount=5000" in table.stdout
    cut = ops.cli("list", "--limit", "1")
    assert "1 intent(s) (the first 1: --limit shows more)" in cut.stdout  # a full page says there may be more


def test_list_by_default_also_shows_calls_whose_worker_died_and_not_live_ones(ops: Ops) -> None:
    """A helper SIGKILLed four workers mid-call: the runbook's `list` printed "0 intent(s)" while four in_flight
    records, leases expired, had all reached the provider. A live call is not in doubt and stays out."""
    dead_worker = Ledger(
        ops.ledger.store,
        clock=FakeClock(datetime.now(UTC) - timedelta(minutes=10)),  # claimed ten minutes ago: lease long over
        crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE),
    )
    with pytest.raises(SimulatedCrash):
        dead_worker.execute(ops.adapter, EffectRequest(operation="charge", params={"n": 1}), intent_key=KEY)
    live_worker = Ledger(ops.ledger.store, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE))
    with pytest.raises(SimulatedCrash):  # its lease runs for two more minutes
        live_worker.execute(ops.adapter, EffectRequest(operation="charge", params={"n": 2}), intent_key=LIVE)
    ops.unknown("invoice:inv_2:collect:v1")
    listed = ops.cli_json("list")
    assert [(r["intent_key"], r["status"], r["lease_expired"]) for r in listed] == [
        (KEY, "in_flight", True),
        ("invoice:inv_2:collect:v1", "unknown", False),
    ]
    table = ops.cli("list", env={"COLUMNS": "200"})
    assert "2 intent(s)" in table.stdout
    assert "in_flight, lease expired" in table.stdout
    flying = ops.cli_json("list", "--status", "in_flight")  # asked for: every one, live or not
    assert {(r["intent_key"], r["lease_expired"]) for r in flying} == {(KEY, True), (LIVE, False)}
    assert len(ops.fake.effects()) == 3  # each reached the provider once; listing changed nothing
    assert ops.ledger.get(KEY).status == "in_flight"


def test_list_by_key_prefix_tells_one_invoices_story_in_every_status(ops: Ops) -> None:
    """The forensics review had to dump every status and grep JSON to find inv_43's :v1 (unknown) and :v2."""
    ops.unknown("invoice:inv_43:collect:v1", happened=False)
    ops.confirmed("invoice:inv_43:refund:v1")
    ops.confirmed("invoice:inv_430:collect:v1")
    listed = ops.cli_json("list", "--key-prefix", "invoice:inv_43:")
    assert sorted((r["intent_key"], r["status"]) for r in listed) == [
        ("invoice:inv_43:collect:v1", "unknown"),
        ("invoice:inv_43:refund:v1", "confirmed"),
    ]
    only = ops.cli_json("list", "--key-prefix", "invoice:inv_43:", "--status", "confirmed")
    assert [r["intent_key"] for r in only] == ["invoice:inv_43:refund:v1"]
    refused = ops.cli("list", "--key-prefix", "")
    assert refused.exit_code == 1
    assert "key prefix must be a non-empty str" in refused.stderr


def test_tables_print_intent_keys_as_they_are(ops: Ops) -> None:
    """An operator copies keys from the tables into the next command: ``:ok:`` and ``:id:`` are emoji codes a
    rich console would otherwise replace (``user:ok:...`` printed as ``user🆗...``)."""
    keys = ["user:ok:verify:v1", "order:id:ship:v1"]
    for key in keys:
        ops.unknown(key)
    listed, shown = ops.cli("list"), ops.cli("show", keys[0])
    assert listed.exit_code == 0, listed.output
    assert shown.exit_code == 0, shown.output
    for key in keys:
        assert key in listed.stdout
    assert keys[0] in shown.stdout


def test_piped_tables_keep_each_row_on_one_line(ops: Ops) -> None:
    """Output to a file, grep or a log is not a terminal: rows must not wrap at 80 columns, splitting a tenant
    into ``defaul`` / ``t`` and a status into ``confir`` / ``med``."""
    key = "invoice:inv_with_a_rather_long_identifier_0001:collect:v1"
    ops.unknown(key, amount=5000)
    listed = ops.cli("list", env={"COLUMNS": None})  # type: ignore[dict-item]  # unset: as in a pipe
    assert listed.exit_code == 0, listed.output
    (row,) = [line for line in listed.stdout.splitlines() if key in line]
    assert "default" in row
    assert "unknown" in row
    assert "amount=5000" in row


def test_show_has_every_field_audit_and_evidence(ops: Ops) -> None:
    record = ops.unknown(KEY)
    shown = ops.cli_json("show", KEY)
    assert shown["record"]["version"] == record.version
    assert shown["record"]["status"] == "unknown"
    assert [a["to_status"] for a in shown["audit"]] == ["unknown"]  # the claim is the record's own
    assert shown["record"]["updated_by"] == record.updated_by is not None
    assert shown["evidence"] == []
    assert shown["approvals"] == []
    table = ops.cli("show", KEY)
    assert table.exit_code == 0
    assert f"--expect-version {record.version}" in table.stdout
    assert "audit trail" in table.stdout


def test_show_of_a_purged_record_prints_what_is_left_of_it_and_says_so(ops: Ops) -> None:
    """The forensics review purged a settled send: `show` said only "no effect recorded", the words it says of
    an intent never attempted (support could conclude "never sent" and send again), while its audit trail and
    evidence, which purges keep, said who confirmed it and on what."""
    ops.unknown(KEY)
    settled = Operator(ops.ledger)
    settled.resolve(
        KEY, to=EffectStatus.CONFIRMED, operator="bob", reason="in the dashboard", expect_version=2,
        provider_result_id="fx_1", evidence="dashboard:fx_1",
    )  # fmt: skip
    assert ops.cli_json("purge", "--older-than", "0", "--force-min-days", "0")["deleted"] == 1
    table = ops.cli("show", KEY, env={"COLUMNS": "200"})
    assert table.exit_code == 1
    assert "purged, or lost in a restore from a backup; its audit trail and evidence" in table.stderr
    assert "operator:bob" in table.stdout  # the trail: who confirmed it
    shown = ops.cli("show", KEY, "--json")
    assert shown.exit_code == 1
    remains = json.loads(shown.stdout)
    assert remains["record"] is None
    assert [(a["to_status"], a["detail"].get("provider_result_id")) for a in remains["audit"]] == [
        ("unknown", None),
        ("confirmed", "fx_1"),
    ]
    never = ops.cli("show", "invoice:never:collect:v1")
    assert (never.exit_code, never.stdout) == (1, "")  # never recorded: nothing to show, as before
    assert "no effect recorded for intent 'invoice:never:collect:v1'" in never.stderr
    assert "purged" not in never.stderr
    assert len(ops.fake.effects()) == 1


def test_show_sums_up_evidence_that_fills_pages_unless_asked_for_all(ops: Ops) -> None:
    """A send to many recipients gathers an event each: the table counts them and shows the ends."""
    record = ops.unknown(KEY, happened=False)
    for n in range(30):
        kind, verdict = ("processed", EvidenceVerdict.ACCEPTS) if n < 25 else ("open", EvidenceVerdict.INFORMATIONAL)
        event = Evidence(
            tenant=record.tenant,
            intent_key=KEY,
            provider=record.provider,
            source="events",
            event_id=f"evt_{n:02}",
            kind=kind,
            verdict=verdict,
            received_at=ops.ledger.clock(),
        )
        assert ops.ledger.record_evidence(event)
    table = ops.cli("show", KEY)
    assert table.exit_code == 0, table.output
    assert "evidence: 30 (25 processed/accepts, 5 open/informational); the first and last 10" in table.stdout
    shown = [n for n in range(30) if f"evt_{n:02}" in table.stdout]
    assert shown == [*range(10), *range(20, 30)]
    every = ops.cli("show", KEY, "--all-evidence")
    assert [n for n in range(30) if f"evt_{n:02}" in every.stdout] == list(range(30))
    assert len(ops.cli_json("show", KEY)["evidence"]) == 30  # JSON, for scripts, has every row
    assert ops.ledger.get(KEY).status == "unknown"  # reading changes nothing


def test_lookup_reports_without_changing(ops: Ops) -> None:
    record = ops.unknown(KEY)
    found = ops.cli_json("lookup", KEY, "--adapters", ADAPTERS)
    assert found["lookup_status"] == "found"
    assert found["provider_result_id"] == ops.fake.effects()[0].result_id
    after = ops.ledger.get(KEY)
    assert (after.status, after.version) == (record.status, record.version)


def test_lookup_says_when_an_absence_proves_nothing_yet(ops: Ops) -> None:
    """Inside the provider's normal response window the ledger takes an "absent" for no answer: so does the
    operator's lookup, saying until when; a send long past shows none."""
    record = ops.unknown(KEY, happened=False)
    fresh = ops.cli_json("lookup", KEY, "--adapters", "ops_fake_adapters:proving_absence")
    assert (fresh["lookup_status"], fresh["record_version"]) == ("absent", record.version)
    assert fresh["held_back"].startswith("the last attempt, sent at ")
    other = "invoice:inv_2:collect:v1"
    ops.unknown(other, happened=False, sent_ago=timedelta(minutes=2))
    old = ops.cli_json("lookup", other, "--adapters", "ops_fake_adapters:proving_absence")
    assert (old["lookup_status"], old["held_back"]) == ("absent", None)
    assert ops.fake.effects() == []


def test_errors_are_one_line_on_stderr_without_traceback(ops: Ops) -> None:
    ops.unknown(KEY)
    missing = ops.cli("show", "invoice:nope:collect:v1")
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error [intent_not_found]: no effect recorded")
    assert "Traceback" not in missing.output
    bad_key = ops.cli("show", "not-a-key")
    assert bad_key.exit_code == 1
    assert "invalid_intent_key" in bad_key.stderr
    no_adapter = ops.cli("lookup", KEY, "--adapters", "no_such_module:adapters")
    assert no_adapter.exit_code == 1
    assert "cannot be loaded" in no_adapter.stderr
    assert "PYTHONPATH=. safe-effects" in no_adapter.stderr  # the console script does not search the cwd
    bad_store = ops.cli("list", env={"SAFE_EFFECTS_STORE": "mysql://x"})
    assert bad_store.exit_code == 1
    assert "unknown store URL scheme" in bad_store.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("reconcile", "--adapters", "os:sep"),
            "--adapters 'os:sep' is a str, not a callable returning the adapters",
        ),
        (
            ("metrics", "--addr", "no such host.invalid", "--port", "0"),
            "cannot serve metrics on no such host.invalid:0",
        ),
        (  # refused as the CLI ledger's worker id, before: "worker_id holds ..."
            ("resolve", KEY, "--as", "rejected", "--operator", "b\udcffob", "--reason", "r", "--expect-version", "2"),
            "operator identity (--operator) holds a lone surrogate or NUL",
        ),
        (("list", "--provider", "p\udcff"), "provider holds a lone surrogate or NUL"),
    ],
    ids=["adapters not callable", "metrics address", "operator", "provider"],
)
def test_a_bad_option_is_a_typed_one_line_error_naming_it(ops: Ops, args: tuple[str, ...], said: str) -> None:
    """Each was an untyped ``error: TypeError/gaierror/UnicodeEncodeError`` line, or named the wrong setting."""
    before = ops.ledger.store.list_by_status(list(EffectStatus))
    refused = ops.cli(*args)
    assert refused.exit_code == 1
    assert refused.stderr.startswith(f"error [invalid_input]: {said}")
    assert ops.ledger.store.list_by_status(list(EffectStatus)) == before
