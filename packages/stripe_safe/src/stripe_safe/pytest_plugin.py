"""pytest plugin of stripe-safe (entry point ``pytest11``): ``fake_stripe``, a fresh FakeStripe per test.

It runs on the core plugin's ``safe_clock`` (key retention moves with the ledger's time) and its faults are
checked at teardown through ``safe_faults``. The SDK is imported only when the fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from safe_effects.testing import FakeClock, FaultWatch
    from stripe_safe.testing import FakeStripe


@pytest.fixture
def fake_stripe(safe_clock: FakeClock, safe_faults: FaultWatch) -> Iterator[FakeStripe]:
    """A FakeStripe on 127.0.0.1: ``StripeClient(..., base_addresses={"api": fake_stripe.url})``."""
    from stripe_safe.testing import FakeStripe  # noqa: PLC0415  # keeps the SDK out of pytest's start-up

    with FakeStripe(clock=safe_clock) as fake:
        safe_faults.watch("fake_stripe", fake.pending_faults)
        yield fake
