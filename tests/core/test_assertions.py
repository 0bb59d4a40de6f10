"""assert_effect: both sides at once, and the one outcome no expectation can make pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from safe_effects import EffectRequest, Ledger
from safe_effects.testing import FakeClock, GenericFakeAdapter, GenericFakeProvider, assert_effect

KEY = "invoice:inv_42:collect:v1"


@pytest.fixture
def confirmed(store_url: str, tmp_path: Path) -> Iterator[tuple[Ledger, GenericFakeProvider]]:
    """One intent confirmed through the ledger, with the generic fake holding its one effect."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock)
    with Ledger.open(store_url, clock=clock) as ledger:
        request = EffectRequest(operation="charge", params={"amount": 1})
        ledger.execute(GenericFakeAdapter(fake), request, intent_key=KEY)
        yield ledger, fake


def test_it_passes_when_both_sides_agree(confirmed: tuple[Ledger, GenericFakeProvider]) -> None:
    ledger, fake = confirmed
    record = assert_effect(ledger, KEY, status="confirmed", provider_effects=len(fake.effects()))
    assert record.provider_result_id == fake.effects()[0].result_id


@pytest.mark.parametrize("effects", [0, 2])
def test_confirmed_with_other_than_one_effect_fails_whatever_is_expected(
    confirmed: tuple[Ledger, GenericFakeProvider], effects: int
) -> None:
    ledger, _ = confirmed
    with pytest.raises(AssertionError, match=f"never confirmed with {effects} provider effects: exactly one"):
        assert_effect(ledger, KEY, status="confirmed", provider_effects=effects, expected_effects=effects)


def test_a_mismatch_shows_both_sides(confirmed: tuple[Ledger, GenericFakeProvider]) -> None:
    ledger, _ = confirmed
    with pytest.raises(AssertionError) as failed:
        assert_effect(ledger, KEY, status="unknown", provider_effects=1)
    message = str(failed.value)
    assert "provider side: 1 effect(s), expected 1" in message
    assert "ledger side:   confirmed, provider_result_id='fx_1'" in message
    assert message.endswith("expected unknown")
