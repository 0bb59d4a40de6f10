"""Configuration seams: approval thresholds, the adapters entry-point group, the optional metrics extra."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from safe_effects import ApprovalThresholds, InvalidInput, MissingDependency, RegisteredAdapters, StoreCollector
from safe_effects import _adapter_registry as registry_module


def test_thresholds_parse_tighten_and_fail_safe() -> None:
    env = {"SAFE_EFFECTS_APPROVAL_THRESHOLDS": "usd=100000, EUR=90000"}
    configured = ApprovalThresholds.configured("usd=5000", "gbp=7", env=env)
    # gbp has no threshold (and there is no catch-all): it always needs approval, which gbp=7 would loosen
    assert configured.limits == {"usd": 5000, "eur": 90000}
    assert ApprovalThresholds.configured("usd=999999", env=env).limits["usd"] == 100000
    with_catch_all = {"SAFE_EFFECTS_APPROVAL_THRESHOLDS": "usd=100000, *=50"}
    assert ApprovalThresholds.configured("gbp=7", env=with_catch_all).limits == {"usd": 100000, "*": 50, "gbp": 7}
    lowered = ApprovalThresholds.configured("*=50", env=env)  # a catch-all option lowers named currencies too
    assert lowered.limits == {"usd": 50, "eur": 50}
    assert lowered.requires_approval({"amount": "5000", "currency": "usd"}) is not None
    assert configured.requires_approval({"amount": "4999", "currency": "usd"}) is None
    assert "at or above" in (configured.requires_approval({"amount": "5000", "currency": "USD"}) or "")
    assert "no configured threshold" in (configured.requires_approval({"amount": "1", "currency": "jpy"}) or "")
    assert "no configured threshold" in (configured.requires_approval({"amount": "6", "currency": "gbp"}) or "")
    assert "not an integer" in (configured.requires_approval({"amount": "12.50", "currency": "usd"}) or "")
    assert configured.requires_approval({"recipients": "3"}) is None  # an email: no amount at stake
    assert ApprovalThresholds().requires_approval({"amount": "10000000", "currency": "usd"}) is None
    assert ApprovalThresholds.parse("*=10").requires_approval({"amount": "10", "currency": "jpy"}) is not None
    assert "not an integer" in (configured.requires_approval({"amount": "٣", "currency": "usd"}) or "")
    assert "not an integer" in (configured.requires_approval({"amount": "9" * 5000, "currency": "usd"}) or "")
    for bad in ("usd", "usd=ten", "=5", "usd=-1", "usd=²", "usd=" + "1" * 5000):  # ²: isdigit() alone says yes
        with pytest.raises(InvalidInput, match="must look like usd=100000"):
            ApprovalThresholds.parse(bad)


@pytest.mark.parametrize(
    ("env_text", "option", "currency"),
    [
        ("*=100000", "usd=999999999", "usd"),  # would lift usd above the catch-all
        ("usd=100000", "eur=999999999", "eur"),  # would switch off "no threshold: always needs approval"
        ("usd=100000", "*=999999999", "eur"),  # the same through a catch-all the environment does not set
    ],
)
def test_threshold_option_cannot_loosen_a_catch_all_or_the_fail_safe(env_text: str, option: str, currency: str) -> None:
    env = {"SAFE_EFFECTS_APPROVAL_THRESHOLDS": env_text}
    summary = {"amount": "250000", "currency": currency}
    assert ApprovalThresholds.configured(env=env).requires_approval(summary) is not None
    assert ApprovalThresholds.configured(option, env=env).requires_approval(summary) is not None
    assert ApprovalThresholds.configured(option, env=env) == ApprovalThresholds.configured(env=env)


def test_registered_adapters_load_lazily_and_name_a_broken_factory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    points = [
        EntryPoint("fake", "ops_fake_adapters:from_env", "safe_effects.adapters"),
        EntryPoint("broken", "ops_fake_adapters:no_such_factory", "safe_effects.adapters"),
    ]
    monkeypatch.setattr(
        registry_module, "entry_points", lambda group: points if group == "safe_effects.adapters" else []
    )
    adapters = RegisteredAdapters({"SAFE_EFFECTS_OPS_FAKE": str(tmp_path / "fake.db")})
    assert sorted(adapters) == ["broken", "fake"]
    assert adapters.get("stripe") is None
    assert adapters["fake"] is adapters["fake"]  # built once, on first use
    assert adapters["fake"].provider == "fake"
    with pytest.raises(InvalidInput, match="provider 'broken'"):
        adapters["broken"]
    with pytest.raises(InvalidInput, match="could not be built: SAFE_EFFECTS_OPS_FAKE is not set in the environment"):
        RegisteredAdapters({})["fake"]  # a missing variable is named, not a KeyError from deep inside


def test_metrics_without_prometheus_client_names_the_extra(monkeypatch: pytest.MonkeyPatch, store: Any) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingDependency, match=r"safe-effects\[metrics\]"):
        StoreCollector(store)
