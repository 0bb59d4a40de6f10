"""Failure-matrix fixtures: PostgreSQL only (a fresh schema per test), a fresh provider fake per test.

Set ``SAFE_EFFECTS_MATRIX_JSON=path`` to have every observed cell written there at the end of the session
(scripts/failure_matrix_report.py does, to render docs/failure-matrix.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from ses_safe.testing import moto_server

from ._providers import ProviderFake, SendGridFake, SesFake, StripeFake

SES_SENDER = "billing@example.com"


@pytest.fixture
def backend() -> str:
    """The matrix runs on PostgreSQL only: the ledger real deployments share between worker processes."""
    return "postgres"


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def verify_ses_sender(moto_url: str) -> Callable[[], None]:
    """moto refuses unverified senders; after each reset the matrix's sender is verified again."""
    ses = boto3.session.Session().client(
        "ses",
        region_name="us-east-1",
        endpoint_url=moto_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )

    def verify() -> None:
        ses.verify_email_identity(EmailAddress=SES_SENDER)

    return verify


@pytest.fixture
def make_fake(request: pytest.FixtureRequest) -> Iterator[Callable[[str], ProviderFake]]:
    """A fresh fake for the named provider, closed after the test."""
    made: list[StripeFake | SendGridFake | SesFake] = []

    def make(provider: str) -> ProviderFake:
        fake: StripeFake | SendGridFake | SesFake
        if provider == "stripe":
            fake = StripeFake()
        elif provider == "sendgrid":
            fake = SendGridFake()
        else:
            fake = SesFake(request.getfixturevalue("moto_url"), request.getfixturevalue("verify_ses_sender"))
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.close()


class MatrixResults:
    """Observed cells of this session, keyed ``case/provider``."""

    def __init__(self) -> None:
        self.cells: dict[str, dict[str, Any]] = {}

    def record(self, case: str, provider: str, **fields: Any) -> None:
        self.cells[f"{case}/{provider}"] = {"case": case, "provider": provider, **fields}


@pytest.fixture(scope="session")
def matrix_results() -> Iterator[MatrixResults]:
    results = MatrixResults()
    yield results
    target = os.environ.get("SAFE_EFFECTS_MATRIX_JSON")
    if target:
        Path(target).write_text(json.dumps(results.cells, indent=2, sort_keys=True) + "\n")
