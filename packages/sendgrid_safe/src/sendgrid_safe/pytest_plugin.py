"""pytest plugin of sendgrid-safe (entry point ``pytest11``): ``fake_sendgrid``, a fresh FakeSendGrid per test.

Its faults are checked at teardown through the core plugin's ``safe_faults``. The SDK is imported only when
the fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from safe_effects.testing import FaultWatch
    from sendgrid_safe.testing import FakeSendGrid


@pytest.fixture
def fake_sendgrid(safe_faults: FaultWatch) -> Iterator[FakeSendGrid]:
    """A FakeSendGrid on 127.0.0.1 accepting ``SG.fake-key``: ``SendGridAPIClient(..., host=fake_sendgrid.url)``."""
    from sendgrid_safe.testing import FakeSendGrid  # noqa: PLC0415  # keeps the SDK out of pytest's start-up

    with FakeSendGrid() as fake:
        safe_faults.watch("fake_sendgrid", fake.server.pending_faults)
        yield fake
