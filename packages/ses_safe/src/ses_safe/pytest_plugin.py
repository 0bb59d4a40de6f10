"""pytest plugin of ses-safe (entry point ``pytest11``): ``fake_ses``, a fault proxy in front of a moto server.

One moto server per session (``ses_moto_url``, emptied before each test); the proxy is per test and its
transport faults are checked at teardown through the core plugin's ``safe_faults``. moto comes with
``ses-safe[testing]`` and is imported only when a fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from safe_effects.testing import FaultWatch
    from ses_safe.testing import MotoFaultProxy


@pytest.fixture(scope="session")
def ses_moto_url() -> Iterator[str]:
    """A moto server on 127.0.0.1 for the whole session."""
    from ses_safe.testing import moto_server  # noqa: PLC0415  # boto3 stays out of start-up

    with moto_server() as url:
        yield url


# moto's own advice: fake credentials in every test, so boto3 signs requests without a profile and no test can
# reach real AWS with real keys; a region for clients that name none
FAKE_AWS_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture
def fake_ses(ses_moto_url: str, safe_faults: FaultWatch, monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoFaultProxy]:
    """The emptied moto server behind a fault proxy: ``ses_safe.client(..., endpoint_url=fake_ses.url)``, with
    fake AWS credentials and a default region in the environment for the test."""
    from ses_safe.testing import MotoFaultProxy, reset_moto  # noqa: PLC0415  # boto3 stays out of start-up

    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    reset_moto(ses_moto_url)
    with MotoFaultProxy(ses_moto_url) as proxy:
        safe_faults.watch("fake_ses", proxy.pending_faults)
        yield proxy
