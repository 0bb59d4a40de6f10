"""GenericFakeProvider keeps its declared contract: keys remembered for retention, strict parameter matching."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from safe_effects import Outcome
from safe_effects._contract import ParameterMatching
from safe_effects.testing import FakeClock, FakeDeclined, GenericFakeAdapter, GenericFakeProvider, generic_contract

KEY = "default/order:ord_7:charge:v1"


def test_a_key_forgotten_after_retention_and_used_again_dedupes_again(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", retention=timedelta(hours=24), clock=clock)
    first = fake.handle(KEY, {"amount": 500})
    clock.advance(timedelta(hours=25))
    second = fake.handle(KEY, {"amount": 500})  # forgotten: a new effect, as on Stripe
    clock.advance(timedelta(minutes=1))
    assert fake.handle(KEY, {"amount": 500}) == second  # the new use is remembered
    assert [e.result_id for e in fake.effects(KEY)] == [first, second]


def test_a_remembered_key_with_other_params_is_refused_as_final(tmp_path: Path) -> None:
    assert generic_contract().idempotency.parameter_matching is ParameterMatching.STRICT
    fake = GenericFakeProvider(tmp_path / "fake.db")
    fake.handle(KEY, {"amount": 500})
    with pytest.raises(FakeDeclined, match="first used with other parameters") as refused:
        fake.handle(KEY, {"amount": 999})
    assert len(fake.effects(KEY)) == 1
    verdict = GenericFakeAdapter(fake).classify(refused.value)
    assert (verdict.outcome, verdict.error_code) == (Outcome.FINAL, "idempotency_mismatch")


def test_without_dedupe_other_params_under_one_key_make_another_effect(tmp_path: Path) -> None:
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=False)
    fake.handle(KEY, {"amount": 500})
    fake.handle(KEY, {"amount": 999})
    assert len(fake.effects(KEY)) == 2
