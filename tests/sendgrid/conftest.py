"""SendGrid fixtures: a fresh fake per test, a ledger on the shared ``store_url``, wrapped and raw SDK clients."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sendgrid
from sendgrid.helpers.mail import Mail

from safe_effects import EffectRecord, Ledger, RetryPolicy
from sendgrid_safe import SendGridAPIClient
from sendgrid_safe.testing import FakeSendGrid

API_KEY = "SG.fake-key"
TIMEOUT = 1.0  # client deadline, with room for a busy 2-core CI machine; delay faults wait longer
FAST_RETRY = RetryPolicy(initial_wait=0.0, max_wait=0.0)


@pytest.fixture(scope="session")
def running_fake() -> Iterator[FakeSendGrid]:
    with FakeSendGrid(api_key=API_KEY) as running:
        yield running


@pytest.fixture
def fake(running_fake: FakeSendGrid) -> FakeSendGrid:
    """The session's fake, emptied: no messages, requests, faults or changed settings from other tests."""
    running_fake.reset()
    return running_fake


@pytest.fixture
def ledger(store_url: str) -> Iterator[Ledger]:
    opened = Ledger.open(store_url, retry=FAST_RETRY)
    yield opened
    opened.close()


@pytest.fixture
def make_sg(fake: FakeSendGrid, ledger: Ledger) -> Callable[..., SendGridAPIClient]:
    """Wrapped clients on the test ledger; the fake and its key unless told otherwise."""

    def make(api_key: str = API_KEY, host: str | None = None, **options: Any) -> SendGridAPIClient:
        options = {"ledger": ledger, "timeout": TIMEOUT, **options}
        return SendGridAPIClient(api_key, host=host or fake.url, **options)

    return make


@pytest.fixture
def sg(make_sg: Callable[..., SendGridAPIClient]) -> SendGridAPIClient:
    return make_sg()


@pytest.fixture
def raw(fake: FakeSendGrid) -> Any:
    """The plain SDK client, for classifying real failures without a ledger."""
    client = sendgrid.SendGridAPIClient(API_KEY, host=fake.url)
    client.client.timeout = TIMEOUT
    return client


@pytest.fixture
def key() -> str:
    """A fresh intent key per test (stores may be shared between tests)."""
    return f"invoice:inv_{uuid.uuid4().hex[:12]}:email:v1"


@pytest.fixture
def mail() -> Callable[..., Mail]:
    """Build a Mail like a caller would; ``to`` may list several recipients."""

    def build(to: str | list[str] = "customer@example.com", subject: str = "Your invoice") -> Mail:
        return Mail(from_email="billing@example.com", to_emails=to, subject=subject, plain_text_content="Thanks.")

    return build


@pytest.fixture
def record(ledger: Ledger) -> Callable[[str], EffectRecord]:
    return ledger.get
