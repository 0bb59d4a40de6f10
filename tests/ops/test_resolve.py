"""resolve, approve, decline, pending: every refusal is clear and changes nothing; the two-person rule holds."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from safe_effects import (
    ApprovalState,
    EffectRecord,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    Evidence,
    EvidenceVerdict,
    InvalidInput,
    Ledger,
    LookupResult,
    LookupStatus,
    Operator,
    Reconciler,
    Resolution,
    UnknownTenant,
)
from safe_effects._store_url import parse_postgres_url  # the store's own reading of its URL
from safe_effects.cli._app import app
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

if TYPE_CHECKING:
    from conftest import Ops

KEY = "invoice:inv_9:collect:v1"
BIG = {"SAFE_EFFECTS_APPROVAL_THRESHOLDS": "usd=100000"}


def resolve(ops: Ops, *extra: str, version: int, operator: str = "alice", env: dict[str, str] | None = None) -> Any:
    return ops.cli(
        "resolve", KEY, "--operator", operator, "--reason", "seen in the dashboard", "--expect-version",
        str(version), *extra, env=env,
    )  # fmt: skip


CONFIRM = ("--as", "confirmed", "--provider-id", "fx_1", "--evidence", "dashboard:fx_1")


def test_resolve_looks_the_effect_up_first_and_refuses_what_the_provider_contradicts(ops: Ops) -> None:
    """The misuse review: an operator who found nothing in a dashboard (the wrong account, too early) resolved a
    charged intent as rejected, and the job's `:v2` charged again. With the provider's adapter at hand the
    resolution is checked against a lookup first."""
    record = ops.unknown(KEY)  # the fake took it: a lookup finds it
    [effect] = ops.fake.effects()
    lookups = ("--adapters", "ops_fake_adapters:adapters")
    refused = resolve(ops, "--as", "rejected", *lookups, version=record.version)
    assert refused.exit_code == 1
    assert f"cannot be resolved as rejected: a lookup at fake (search) found {effect.result_id}, so it acted" in (
        refused.stderr
    )
    wrong = resolve(ops, "--as", "confirmed", "--provider-id", "fx_99", "--evidence", "x", *lookups, version=2)
    assert wrong.exit_code == 1
    assert f"cannot be confirmed as 'fx_99': a lookup at fake (search) found {effect.result_id}" in wrong.stderr
    assert ops.ledger.get(KEY) == record

    # on the operator's word alone
    decided = resolve(ops, "--as", "rejected", *lookups, "--no-lookup", version=record.version)
    assert decided.exit_code == 0, decided.output
    assert "(not looked up (no adapters: --no-lookup))" in decided.stdout  # said, never left to be guessed
    assert ops.ledger.get(KEY).status == "rejected"
    assert len(ops.fake.effects()) == 1


@pytest.mark.parametrize(
    ("asks", "refused", "advice"),
    [
        (  # the QA pass: a rejection asked for while the provider's search lagged was applied by the approver
            # after the charge had become visible, and the job's `:v2` charged again
            ("--as", "rejected"),
            "cannot be resolved as rejected: a lookup at fake (search) found",
            "resolve it as confirmed with that id",
        ),
        (  # the refusal named `--provider-id`, an option `approve` does not take
            ("--as", "confirmed", "--provider-id", "fx_WRONG", "--evidence", "bank"),
            "cannot be confirmed as 'fx_WRONG'",
            "resolve it with that --provider-id",
        ),
    ],
)
def test_approve_looks_the_effect_up_again_and_refuses_what_the_provider_contradicts(
    ops: Ops, asks: tuple[str, ...], refused: str, advice: str
) -> None:
    record = ops.unknown(KEY, amount=250_000)
    asked = resolve(ops, *asks, "--no-lookup", version=record.version, env=BIG)
    assert "pending:" in asked.stdout
    approved = ops.cli("approve", KEY, "--operator", "bob", "--adapters", "ops_fake_adapters:adapters")
    assert approved.exit_code == 1
    assert refused in approved.stderr
    # the approver cannot change what was asked: the advice is to decline, not to resolve it otherwise
    assert f"decline the request, and alice may then {advice}" in approved.stderr
    assert ops.ledger.get(KEY) == record
    [waiting] = ops.cli_json("pending")
    assert waiting["state"] == "pending"  # refused, not applied: a confirmation may replace it
    assert len(ops.fake.effects()) == 1


class Answering(GenericFakeAdapter):
    """The fake, whose lookups answer as told and whose search may lag as told."""

    def __init__(self, fake: GenericFakeProvider, answer: LookupResult, lag: timedelta | None = None) -> None:
        super().__init__(fake)
        self.answer = answer
        search = self.contract.lookups[0].model_copy(update={"lag": lag})
        self.contract = self.contract.model_copy(update={"lookups": (search,)})

    def lookup(self, record: EffectRecord) -> LookupResult:
        return self.answer


def test_a_confirmation_of_what_the_provider_refused_is_refused(ops: Ops) -> None:
    record = ops.unknown(KEY, happened=False, sent_ago=timedelta(minutes=2))  # past window and skew
    declined = LookupResult(LookupStatus.REFUSED, "search", provider_result_id="fx_declined")
    with pytest.raises(InvalidInput, match=r"cannot be resolved as confirmed: .* found it refused \(fx_declined\)"):
        Operator(ops.ledger, adapters={"fake": Answering(ops.fake, declined)}).resolve(
            KEY, to=EffectStatus.CONFIRMED, operator="alice", reason="seen", expect_version=2,
            provider_result_id="fx_declined", evidence="dashboard",
        )  # fmt: skip
    assert ops.ledger.get(KEY) == record


def test_a_rejection_waits_out_the_lag_of_a_search_that_found_nothing(ops: Ops) -> None:
    record = ops.unknown(KEY, happened=False)
    nothing = LookupResult(LookupStatus.INCONCLUSIVE, "search")
    lagging = {"fake": Answering(ops.fake, nothing, lag=timedelta(hours=1))}
    with pytest.raises(InvalidInput, match=r"cannot be resolved as rejected yet: .* may lag up to 1:00:00 behind"):
        Operator(ops.ledger, adapters=lagging).resolve(
            KEY, to=EffectStatus.REJECTED, operator="alice", reason="not in the dashboard", expect_version=2
        )
    assert ops.ledger.get(KEY) == record
    an_hour_later = Ledger(ops.ledger.store, clock=lambda: datetime.now(UTC) + timedelta(hours=1, minutes=1))
    decision = Operator(an_hour_later, adapters=lagging).resolve(
        KEY, to=EffectStatus.REJECTED, operator="alice", reason="not in the dashboard", expect_version=2
    )
    assert decision.record.status is EffectStatus.REJECTED
    assert ops.fake.effects() == []


class Unconfigured(Mapping[str, Any]):
    """The registered adapters of an operator's shell without the provider's API key."""

    def __getitem__(self, provider: str) -> Any:
        raise InvalidInput(f"the adapter for provider {provider!r} could not be built: FAKE_API_KEY is not set")

    def __iter__(self) -> Iterator[str]:
        return iter(["fake"])

    def __len__(self) -> int:
        return 1


def test_a_resolution_whose_lookup_cannot_be_made_says_how_to_decide_without_it(ops: Ops) -> None:
    record = ops.unknown(KEY)
    with pytest.raises(InvalidInput, match=r"FAKE_API_KEY is not set; .* or pass --no-lookup to decide on your"):
        Operator(ops.ledger, adapters=Unconfigured()).resolve(
            KEY, to=EffectStatus.REJECTED, operator="alice", reason="not in the dashboard", expect_version=2
        )
    assert ops.ledger.get(KEY) == record


def test_resolve_goes_on_when_no_lookup_finds_the_effect(ops: Ops) -> None:
    # lost before the fake acted, two minutes ago: nothing to find, and nothing still running (window + 2 x skew)
    record = ops.unknown(KEY, happened=False, sent_ago=timedelta(minutes=2))
    result = resolve(ops, "--as", "rejected", "--adapters", "ops_fake_adapters:adapters", version=record.version)
    assert result.exit_code == 0, result.output
    assert "(looked up at fake (search): inconclusive)" in result.stdout
    assert ops.ledger.get(KEY).status == "rejected"
    assert ops.fake.effects() == []


def test_resolve_confirmed_records_operator_evidence_and_audit(ops: Ops) -> None:
    record = ops.unknown(KEY)
    result = resolve(ops, *CONFIRM, version=record.version)
    assert result.exit_code == 0, result.output
    assert f"{KEY} is now confirmed (provider id fx_1) v{record.version + 1} by alice" in result.stdout
    assert "(not looked up: no adapter for provider 'fake' here)" in result.stdout  # only installed providers
    after = ops.ledger.get(KEY)
    assert after.provider_result_id == "fx_1"
    assert after.resolution is not None
    assert (after.resolution.method, after.resolution.operator) == ("operator", "alice")
    assert (after.resolution.evidence, after.resolution.reason) == ("dashboard:fx_1", "seen in the dashboard")
    last = ops.ledger.store.audit_trail("default", KEY)[-1]
    assert (last.from_status, last.to_status, last.actor, last.reason) == (
        "unknown", "confirmed", "operator:alice", "seen in the dashboard",
    )  # fmt: skip


def test_resolve_rejected_needs_no_provider_id(ops: Ops) -> None:
    record = ops.unknown(KEY, happened=False)
    result = resolve(ops, "--as", "rejected", version=record.version, env={"SAFE_EFFECTS_APPROVAL_THRESHOLDS": ""})
    assert result.exit_code == 0, result.output
    assert ops.ledger.get(KEY).status == "rejected"


@pytest.mark.parametrize(
    ("args", "version_delta", "message"),
    [
        (("--as", "confirmed", "--evidence", "x"), 0, "to confirm, the provider's id (--provider-id) is required"),
        (
            ("--as", "confirmed", "--provider-id", "fx_1"),
            0,
            "to confirm, an evidence reference (--evidence) is required",
        ),
        (CONFIRM, -1, "it moved on; run `show` again"),
        (CONFIRM, +1, "it moved on; run `show` again"),
        (("--as", "rejected", "--reason", " "), 0, "a reason (--reason) is required"),
    ],
    ids=["no-provider-id", "no-evidence", "older-version", "future-version", "blank-reason"],
)
def test_resolve_refusals_change_nothing(ops: Ops, args: tuple[str, ...], version_delta: int, message: str) -> None:
    record = ops.unknown(KEY)
    trail = ops.trail(KEY)
    result = resolve(ops, *args, version=record.version + version_delta)
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert ops.ledger.get(KEY) == record
    assert ops.trail(KEY) == trail


def test_resolve_refuses_unknown_intent_and_settled_records(ops: Ops) -> None:
    missing = resolve(ops, *CONFIRM, version=1)
    assert missing.exit_code == 1
    assert "error [intent_not_found]" in missing.stderr
    record = ops.confirmed(KEY)
    trail = ops.trail(KEY)
    settled = resolve(ops, "--as", "rejected", version=record.version)
    assert settled.exit_code == 1
    assert "is confirmed: only an unknown intent can be resolved" in settled.stderr
    assert ops.ledger.get(KEY) == record
    assert ops.trail(KEY) == trail


def test_a_prepared_intent_never_sent_can_be_withdrawn_as_rejected_and_then_never_goes(ops: Ops) -> None:
    """The deploys review left a v1 prepared (refused credentials), then went on under :v2: v1 stayed open in
    every listing and gauge for good, as resolve took only unknowns. Withdrawn, a late execute of it (a relay,
    a retried job) is told it was rejected, and nothing is sent."""
    request = EffectRequest(operation="charge", params={"amount": 100})
    prepared = ops.ledger.prepare(ops.adapter, request, intent_key=KEY)
    confirm = resolve(ops, *CONFIRM, version=prepared.version)
    assert confirm.exit_code == 1  # nothing was sent: there is nothing to confirm
    assert "prepared one (never sent) withdrawn as rejected" in confirm.stderr
    withdrawn = resolve(ops, "--as", "rejected", version=prepared.version)
    assert withdrawn.exit_code == 0, withdrawn.output
    record = ops.ledger.get(KEY)
    assert (record.status, record.updated_by) == (EffectStatus.REJECTED, "operator:alice")
    assert [(a.from_status, a.to_status) for a in ops.ledger.store.audit_trail("default", KEY)] == [
        ("prepared", "rejected")
    ]
    with pytest.raises(EffectRejected, match="rejected by operator alice"):
        ops.ledger.execute(ops.adapter, request, intent_key=KEY)
    assert ops.fake.requests() == []


class _SearchDown(GenericFakeAdapter):
    """The provider's search is down (a 503, a revoked key): every lookup is counted and raises."""

    lookups_made: int = 0

    def lookup(self, record: EffectRecord) -> LookupResult:
        type(self).lookups_made += 1
        raise ConnectionError("search unavailable")


def test_withdrawing_a_prepared_intent_looks_nothing_up_so_a_provider_down_does_not_block_it(ops: Ops) -> None:
    """A prepared intent was never sent: there is nothing at the provider to contradict its withdrawal, which is
    how a ``:v2`` held back by ``EarlierVersionInDoubt`` is let through. Mutant: the lookup made for prepared
    records too refuses the withdrawal while the provider's search is down."""
    request = EffectRequest(operation="charge", params={"amount": 100})
    prepared = ops.ledger.prepare(ops.adapter, request, intent_key=KEY)
    _SearchDown.lookups_made = 0

    decision = Operator(ops.ledger, adapters={"fake": _SearchDown(ops.fake)}).resolve(
        KEY, to=EffectStatus.REJECTED, operator="alice", reason="superseded by v2", expect_version=prepared.version
    )

    assert decision.record.status is EffectStatus.REJECTED
    assert _SearchDown.lookups_made == 0
    assert ops.fake.requests() == []
    assert [(a.from_status, a.to_status) for a in ops.ledger.store.audit_trail("default", KEY)] == [
        ("prepared", "rejected")
    ]


def test_two_person_rule_parks_then_another_operator_applies(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=250_000)
    trail = ops.trail(KEY)
    asked = resolve(ops, *CONFIRM, version=record.version, env=BIG)
    assert asked.exit_code == 0, asked.output
    assert "pending:" in asked.stdout
    assert ops.ledger.get(KEY) == record  # still unknown, same version
    assert ops.trail(KEY) == trail
    [waiting] = ops.cli_json("pending")
    assert (waiting["intent_key"], waiting["requested_by"], waiting["expected_version"]) == (KEY, "alice", 2)
    assert "needs approval: amount 250000 usd is at or above the 100000 usd threshold" in waiting["reason"]
    listed = ops.cli("pending").stdout
    assert "[needs approval: amount 250000 usd" in listed  # free text is never rich markup
    assert "provider id: fx_1" in listed  # the approver sees what they approve
    assert "evidence: dashboard:fx_1" in listed
    assert "dashboard:fx_1" in ops.cli("show", KEY).stdout

    own = ops.cli("approve", KEY, "--operator", " Alice ")
    assert own.exit_code == 1
    assert "a different operator must approve it" in own.stderr
    assert ops.ledger.get(KEY) == record

    again = resolve(ops, "--as", "rejected", version=record.version, operator="carol", env=BIG)
    assert again.exit_code == 1
    assert "alice already asked" in again.stderr

    approved = ops.cli("approve", KEY, "--operator", "bob", "--reason", "checked the bank statement")
    assert approved.exit_code == 0, approved.output
    assert "confirmed (provider id fx_1) v3 by alice, approved by bob" in approved.stdout
    after = ops.ledger.get(KEY)
    assert after.resolution is not None
    assert (after.resolution.operator, after.resolution.approved_by) == ("alice", "bob")
    assert after.provider_result_id == "fx_1"
    settled = [a for a in ops.ledger.store.audit_trail("default", KEY) if a.to_status == "confirmed"]
    assert [a.actor for a in settled] == ["operator:bob"]
    assert ops.cli_json("pending") == []
    assert [a["state"] for a in ops.cli_json("show", KEY)["approvals"]] == ["applied"]
    replay = ops.cli("approve", KEY, "--operator", "dave")
    assert replay.exit_code == 1
    assert "no resolution is pending" in replay.stderr


def test_threshold_option_tightens_but_cannot_loosen(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=50_000)
    loosen = resolve(ops, *CONFIRM, "--approval-threshold", "usd=99999999", version=record.version, env=BIG)
    assert loosen.exit_code == 0
    assert "pending:" not in loosen.stdout  # 50000 is under the env's 100000: applied directly
    other = ops.unknown("invoice:inv_10:collect:v1", amount=150_000)
    loosened = ops.cli(
        "resolve", other.intent_key, *CONFIRM, "--operator", "alice", "--reason", "r",
        "--expect-version", str(other.version), "--approval-threshold", "usd=99999999", env=BIG,
    )  # fmt: skip
    assert "pending:" in loosened.stdout
    tightened = ops.cli(
        "resolve", "invoice:inv_11:collect:v1", "--as", "rejected", "--operator", "alice", "--reason", "r",
        "--expect-version", str(ops.unknown("invoice:inv_11:collect:v1", amount=10, currency="eur").version),
        "--approval-threshold", "usd=1",
    )  # fmt: skip
    assert "pending:" in tightened.stdout  # eur has no threshold once any is set: fails safe


def test_threshold_option_cannot_raise_a_currency_above_the_catch_all(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=250_000)
    asked = resolve(
        ops, "--as", "rejected", "--approval-threshold", "usd=999999999", version=record.version,
        env={"SAFE_EFFECTS_APPROVAL_THRESHOLDS": "*=100000"},
    )  # fmt: skip
    assert asked.exit_code == 0, asked.output
    assert "pending:" in asked.stdout
    assert ops.ledger.get(KEY) == record  # still unknown: a second operator must approve
    assert [a["state"] for a in ops.cli_json("show", KEY)["approvals"]] == ["pending"]


def test_stale_approval_is_refused_and_closed(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=250_000)
    assert resolve(ops, *CONFIRM, version=record.version, env=BIG).exit_code == 0
    # the reconciler settles it meanwhile (the provider's answer arrives)
    reconciled = ops.cli("reconcile", "--adapters", "ops_fake_adapters:adapters")
    assert reconciled.exit_code == 0, reconciled.output
    moved = ops.ledger.get(KEY)
    assert moved.status == "confirmed"
    trail = ops.trail(KEY)
    stale = ops.cli("approve", KEY, "--operator", "bob")
    assert stale.exit_code == 1
    assert "moved on since alice asked" in stale.stderr
    assert ops.ledger.get(KEY) == moved
    assert ops.trail(KEY) == trail
    assert [a["state"] for a in ops.cli_json("show", KEY)["approvals"]] == ["stale"]


@pytest.mark.parametrize(
    ("approver", "message"),
    [
        ("alice\u200b", "holds an invisible character (U+200B)"),  # a zero-width space after the name
        # fullwidth letters: the refusal names the recorded requester, not the look-alike spelling
        ("\uff41\uff4c\uff49\uff43\uff45", "alice asked for this resolution of"),
        # shown as nothing, yet no format character: each approved alice's own request (an operator audit)
        ("alice\u034f", "holds an invisible character (U+034F)"),  # combining grapheme joiner
        ("alice\ufe0f", "holds an invisible character (U+FE0F)"),  # variation selector
        ("alice\u180b", "holds an invisible character (U+180B)"),  # Mongolian free variation selector
        ("alice\u3164", "holds an invisible character (U+3164)"),  # Hangul filler
        ("alice\u2800", "holds an invisible character (U+2800)"),  # braille blank
    ],
)
def test_a_look_alike_name_is_not_a_second_operator(ops: Ops, approver: str, message: str) -> None:
    record = ops.unknown(KEY, amount=250_000)
    assert resolve(ops, *CONFIRM, version=record.version, env=BIG).exit_code == 0
    refused = ops.cli("approve", KEY, "--operator", approver)
    assert refused.exit_code == 1
    assert message in refused.stderr
    assert ops.ledger.get(KEY) == record
    [waiting] = ops.cli_json("pending")
    assert waiting["state"] == "pending"


def test_a_pending_request_binds_an_operator_whose_shell_has_no_thresholds(ops: Ops) -> None:
    """The ledger records that this resolution needs a second operator: a shell without the thresholds (or
    with other ones) must not settle it directly."""
    record = ops.unknown(KEY, amount=250_000)
    assert resolve(ops, *CONFIRM, version=record.version, env=BIG).exit_code == 0
    direct = resolve(ops, "--as", "rejected", version=record.version)  # SAFE_EFFECTS_APPROVAL_THRESHOLDS=""
    assert direct.exit_code == 1
    assert "alice already asked to resolve" in direct.stderr
    assert ops.ledger.get(KEY) == record
    [waiting] = ops.cli_json("pending")
    assert (waiting["requested_by"], waiting["state"]) == ("alice", "pending")


def test_decline_keeps_the_record_unknown(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=250_000)
    assert resolve(ops, *CONFIRM, version=record.version, env=BIG).exit_code == 0
    declined = ops.cli("decline", KEY, "--operator", "bob", "--reason", "no such charge on the statement")
    assert declined.exit_code == 0, declined.output
    assert ops.ledger.get(KEY) == record
    assert "no such charge on the statement" in ops.cli("show", KEY).stdout  # the decision's reason is shown
    assert ops.cli("approve", KEY, "--operator", "carol").exit_code == 1
    # a fresh request can be made after a decline
    assert "pending:" in resolve(ops, "--as", "rejected", version=record.version, env=BIG).stdout


def test_decline_answers_in_json_as_resolve_and_approve_do(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=250_000)
    assert resolve(ops, *CONFIRM, version=record.version, env=BIG).exit_code == 0
    declined = ops.cli_json("decline", KEY, "--operator", "bob", "--reason", "no such charge on the statement")
    assert declined["pending"] is False
    assert (declined["record"]["status"], declined["record"]["version"]) == ("unknown", record.version)
    assert (declined["approval"]["state"], declined["approval"]["decided_by"]) == ("declined", "bob")
    assert ops.ledger.get(KEY) == record
    assert ops.cli_json("pending") == []


def test_a_request_about_a_purged_record_is_not_applied_to_the_key_recorded_again(ops: Ops) -> None:
    first = ops.unknown(KEY, amount=250_000)
    asked = resolve(ops, "--as", "rejected", version=first.version, env=BIG)
    assert "pending:" in asked.stdout
    # a lookup settles it (alice's request stays pending), then it is purged and the key recorded again
    assert Reconciler(ops.ledger, {"fake": ops.adapter}).run_once().counts() == {"confirmed": 1}
    assert ops.cli("purge", "--older-than", "0", "--force-min-days", "0").exit_code == 0
    assert ops.ledger.store.get("default", KEY) is None
    # recorded again with the same params (the fake still holds the key: other params would be refused), the
    # answer lost: another record, unknown at the same version
    again = ops.unknown(KEY, amount=250_000)
    assert again.version == first.version
    assert again.created_at > first.created_at

    approved = ops.cli("approve", KEY, "--operator", "bob")

    assert approved.exit_code == 1
    assert "moved on since alice asked" in approved.stderr
    assert "recorded anew" in approved.stderr
    assert ops.ledger.get(KEY) == again  # alice never saw this charge: her "rejected" is not applied to it
    assert [a["state"] for a in ops.cli_json("show", KEY)["approvals"]] == ["stale"]
    # a new request for the new record can be made, and applied
    assert "pending:" in resolve(ops, "--as", "rejected", version=again.version, env=BIG).stdout
    assert ops.cli("approve", KEY, "--operator", "bob").exit_code == 0
    assert ops.ledger.get(KEY).status == "rejected"


def test_a_new_request_replaces_one_left_over_from_a_purged_record(ops: Ops) -> None:
    first = ops.unknown(KEY, amount=250_000)
    assert "pending:" in resolve(ops, "--as", "rejected", version=first.version, env=BIG).stdout
    assert Reconciler(ops.ledger, {"fake": ops.adapter}).run_once().counts() == {"confirmed": 1}
    assert ops.cli("purge", "--older-than", "0", "--force-min-days", "0").exit_code == 0
    again = ops.unknown(KEY, amount=250_000)  # same params: the fake still holds the key
    asked = resolve(ops, "--as", "rejected", version=again.version, operator="carol", env=BIG)
    assert asked.exit_code == 0, asked.output
    assert "pending:" in asked.stdout
    approvals = ops.cli_json("show", KEY)["approvals"]
    assert [(a["state"], a["requested_by"]) for a in approvals] == [("stale", "alice"), ("pending", "carol")]
    assert ops.ledger.get(KEY) == again


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"operator": "al\x00ice"}, "operator identity"),
        ({"reason": "seen\x00"}, "a reason"),
        ({"provider_result_id": "fx_\ud800"}, "the provider's id"),
        ({"evidence": "dash\x00board"}, "the evidence reference"),
    ],
)
def test_text_no_store_can_hold_is_refused_before_anything_is_written(
    ops: Ops, fields: dict[str, str], named: str
) -> None:
    """PostgreSQL refuses a NUL inside its INSERT with its own error; both stores refuse it here, typed."""
    record = ops.unknown(KEY, happened=False)
    trail = ops.trail(KEY)
    call = {"to": EffectStatus.REJECTED, "operator": "alice", "reason": "seen", **fields}
    with pytest.raises(InvalidInput, match=f"{named}.* holds a lone surrogate or NUL"):
        Operator(ops.ledger).resolve(KEY, expect_version=record.version, **call)
    assert ops.ledger.get(KEY) == record
    assert ops.trail(KEY) == trail
    assert ops.ledger.store.approvals() == []
    assert len(ops.fake.effects()) == 0


def test_an_approvers_reason_no_store_can_hold_leaves_the_request_pending(ops: Ops) -> None:
    record = ops.unknown(KEY, amount=500_000)
    parked = resolve(ops, *CONFIRM, version=record.version, env=BIG)
    assert parked.exit_code == 0, parked.output
    with pytest.raises(InvalidInput, match=r"the approver's reason .* holds a lone surrogate or NUL"):
        Operator(ops.ledger).approve(KEY, operator="bob", reason="ok\x00")
    assert ops.ledger.get(KEY) == record
    assert [a.state for a in ops.ledger.store.approvals()] == ["pending"]


def test_settle_refuses_an_actor_no_store_can_hold(ops: Ops) -> None:
    record = ops.unknown(KEY)
    with pytest.raises(InvalidInput, match="actor holds a lone surrogate or NUL"):
        ops.ledger.settle(record, EffectStatus.REJECTED, resolution=Resolution(method="operator"), actor="x\x00")
    assert ops.ledger.get(KEY) == record


@contextmanager
def confirming_refused(url: str) -> Iterator[type[Exception]]:
    """A fault inside the database while in the block: a trigger aborts any UPDATE that would confirm a record.

    Yields the driver's error type for it (the store passes a fault that is not an outage through as is).
    """
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)) as conn:
            conn.execute(
                "CREATE TRIGGER refuse_confirming BEFORE UPDATE ON effect_intents WHEN NEW.status = 'confirmed' "
                "BEGIN SELECT RAISE(ABORT, 'disk fault'); END"
            )
            try:
                yield sqlite3.DatabaseError
            finally:
                conn.execute("DROP TRIGGER refuse_confirming")
        return
    import psycopg
    from psycopg import sql

    conninfo, schema, _ = parse_postgres_url(url)
    refuse, table = sql.Identifier(str(schema), "refuse"), sql.Identifier(str(schema), "effect_intents")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE 'disk fault'; END $$")
            .format(refuse)
        )  # fmt: skip
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER refuse_confirming BEFORE UPDATE ON {} FOR EACH ROW "
                "WHEN (NEW.status = 'confirmed') EXECUTE FUNCTION {}()"
            ).format(table, refuse)
        )
        try:
            yield psycopg.Error
        finally:
            conn.execute(sql.SQL("DROP TRIGGER refuse_confirming ON {}").format(table))
            conn.execute(sql.SQL("DROP FUNCTION {}()").format(refuse))


def test_an_approval_whose_settle_fails_stays_pending_with_the_record_unknown(ops: Ops) -> None:
    """Approving marks the request applied and settles the record in one transaction: a fault between the two
    writes leaves neither, so the request can still be approved once the fault is gone."""
    record = ops.unknown(KEY, amount=250_000)
    assert resolve(ops, *CONFIRM, version=record.version, env=BIG).exit_code == 0
    trail = ops.trail(KEY)

    with confirming_refused(ops.url) as fault, pytest.raises(fault, match="disk fault"):
        Operator(ops.ledger).approve(KEY, operator="bob")

    assert ops.ledger.get(KEY) == record
    assert ops.trail(KEY) == trail
    assert [(a.state, a.decided_by) for a in ops.ledger.store.approvals()] == [("pending", None)]
    approved = ops.cli("approve", KEY, "--operator", "bob")
    assert approved.exit_code == 0, approved.output
    assert ops.ledger.get(KEY).status == "confirmed"
    assert [(a.state, a.decided_by) for a in ops.ledger.store.approvals()] == [("applied", "bob")]
    assert len(ops.fake.effects()) == 1  # the provider's one charge, which the request was about


def test_a_ledger_serving_other_tenants_neither_decides_nor_lists_nor_sweeps_this_ones(ops: Ops) -> None:
    """A ledger opened for tenant acme refuses default's intents everywhere, before writing anything."""
    record = ops.unknown(KEY, amount=250_000)
    assert resolve(ops, *CONFIRM, version=record.version, env=BIG).exit_code == 0
    acme = Ledger(ops.ledger.store, tenants=["acme"])
    operator = Operator(acme)
    with pytest.raises(UnknownTenant, match="'default' is not served"):
        operator.decline(KEY, operator="mallory", reason="no", tenant="default")
    with pytest.raises(UnknownTenant, match="'default' is not served"):
        operator.pending(tenant="default")
    assert operator.pending() == []
    [waiting] = Operator(ops.ledger).pending()
    assert (waiting.tenant, waiting.state, waiting.decided_by) == ("default", ApprovalState.PENDING, None)
    assert Reconciler(acme, {"fake": ops.adapter}).run_once().items == ()  # not an error on every sweep
    assert ops.ledger.get(KEY) == record
    assert len(ops.fake.effects()) == 1


def test_a_providers_event_stamped_by_a_lagging_clock_still_stops_a_contradicting_resolution(ops: Ops) -> None:
    """The webhook host's clock runs 5 s behind the worker's: its delivery event looks older than the record.
    The ledger does not settle by it (it could be about a purged record of the key), but an operator's
    rejection it contradicts is refused: refusing is safe either way."""
    record = ops.unknown(KEY)
    delivered = Evidence(
        **{"tenant": "default", "intent_key": KEY, "provider": "fake", "source": "webhook"},
        event_id="evt-1",
        kind="delivered",
        verdict=EvidenceVerdict.CONFIRMS,
        received_at=record.created_at - timedelta(seconds=5),
    )
    assert ops.ledger.record_evidence(delivered)
    assert ops.ledger.get(KEY).status is EffectStatus.UNKNOWN
    refused = resolve(ops, "--as", "rejected", version=record.version)
    assert refused.exit_code == 1
    assert "webhook event 'evt-1' (delivered) says the provider confirms" in refused.stderr
    assert ops.ledger.get(KEY) == record
    assert len(ops.fake.effects()) == 1


@pytest.mark.parametrize(
    ("command", "option"),
    [("resolve", "--reason"), ("resolve", "--evidence"), ("decline", "--reason"), ("approve", "--reason")],
)
def test_the_free_text_options_warn_that_they_are_kept_for_good(command: str, option: str) -> None:
    """What an operator types there lands in the append-only audit trail, which purge never removes: the help
    says so where it is typed, so no customer's name or address goes in."""
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert shown.exit_code == 0
    line = next(line for line in shown.stdout.splitlines() if f" {option} " in line)
    assert "append-only audit trail, which purge never removes" in " ".join(line.split())
    assert "never personal data" in line
