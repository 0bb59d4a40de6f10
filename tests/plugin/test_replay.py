"""fault_cassette on its own: how faults are named and refused, what counts as an effect, the missing extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from safe_effects import EffectUnknown, Ledger, MissingDependency
from safe_effects.testing import ReplayCall, ReplayFault, ReplayFaultKind, fault_cassette

from ._scenarios import CASSETTES, SENDGRID_SEND, STRIPE_CREATE, collect_invoice, email_invoice, sendgrid


@pytest.mark.parametrize(
    ("spec", "kind", "status"),
    [
        ("response_lost", "response_lost", 0),
        ("request_lost", "request_lost", 0),
        ("timeout", "timeout", 0),
        ("503", "status", 503),
        (429, "status", 429),
    ],
)
def test_faults_are_named_by_a_short_string_or_a_status(spec: str | int, kind: ReplayFaultKind, status: int) -> None:
    fault = ReplayFault.parse(spec)
    assert (fault.kind, fault.status) == (kind, status)


def test_a_fault_of_another_type_is_refused_with_a_type_error() -> None:
    with pytest.raises(TypeError, match="a cassette fault is a name, a status or a ReplayFault, not float"):
        ReplayFault.parse(429.0)  # type: ignore[arg-type]


def test_an_unknown_fault_name_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="use response_lost, request_lost, timeout, a status like '429'"):
        ReplayFault.parse("lost")


def test_a_fault_on_an_interaction_the_cassette_does_not_hold_is_refused() -> None:
    with (
        pytest.raises(ValueError, match=r"has 1 interaction\(s\), numbered from 0: no interaction 1"),
        fault_cassette(CASSETTES / STRIPE_CREATE, faults={1: "response_lost"}),
    ):
        pass


def test_faults_on_a_cassette_not_recorded_yet_are_refused(tmp_path: Path) -> None:
    with (
        pytest.raises(FileNotFoundError, match="record it once without faults"),
        fault_cassette(tmp_path / "absent.yaml", faults={0: "429"}),
    ):
        pass


def test_a_fault_never_reached_is_listed_as_unfired(safe_ledger: Ledger) -> None:
    with fault_cassette(CASSETTES / SENDGRID_SEND, faults={1: "500"}) as cassette:
        email_invoice(sendgrid(safe_ledger))
    assert cassette.unfired() == ["interaction 1 (GET /v3/messages): status"]


def test_the_effect_rule_decides_what_counts(safe_ledger: Ledger) -> None:
    def nothing_counts(call: ReplayCall, status: int) -> bool:
        return False

    with fault_cassette(CASSETTES / STRIPE_CREATE, effect=nothing_counts) as cassette:
        collect_invoice(safe_ledger)
    assert cassette.provider_effects == 0
    assert len(cassette.requests()) == 1


def test_without_an_idempotency_header_a_repeat_is_not_answered_from_the_first(safe_ledger: Ledger) -> None:
    with (
        fault_cassette(CASSETTES / STRIPE_CREATE, faults={0: "response_lost"}, idempotency_header=None) as cassette,
        pytest.raises(EffectUnknown),
    ):
        collect_invoice(safe_ledger)
    assert cassette.provider_effects == 1
    assert not cassette.requests()[0].idempotent_replay


def test_recording_writes_no_credentials(tmp_path: Path, safe_ledger: Ledger) -> None:
    from sendgrid_safe.testing import FakeSendGrid

    with FakeSendGrid() as fake, fault_cassette(tmp_path / "new.yaml") as cassette:
        email_invoice(sendgrid(safe_ledger, fake.url))
    recorded = (tmp_path / "new.yaml").read_text()
    assert "POST" in recorded
    assert "SG.fake-key" not in recorded
    assert cassette.requests() == []  # recording serves nothing from the cassette


def test_own_filter_headers_still_keep_credentials_out_of_a_recording(tmp_path: Path, safe_ledger: Ledger) -> None:
    from sendgrid_safe.testing import FakeSendGrid

    with FakeSendGrid() as fake, fault_cassette(tmp_path / "new.yaml", filter_headers=["user-agent"]):
        email_invoice(sendgrid(safe_ledger, fake.url))
    recorded = (tmp_path / "new.yaml").read_text()
    assert "POST" in recorded
    assert "SG.fake-key" not in recorded
    assert "user-agent" not in recorded.lower()  # the user's own header is filtered as well


def test_without_vcrpy_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vcr", None)
    with (
        pytest.raises(MissingDependency, match=r"pip install 'safe-effects\[testing\]'"),
        fault_cassette(CASSETTES / STRIPE_CREATE),
    ):
        pass
