"""The failure matrix as a release gate: every case x provider, real worker processes, both sides checked.

Each cell runs the case's rounds of worker processes against the provider's fake and a fresh PostgreSQL
schema, asserts the invariant (never "confirmed" with zero or two provider effects; an unknown is listed
for reconciliation), then compares everything it observed to the one expected table in ``expected.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from safe_effects import EffectStatus, Ledger

from ._cases import as_json, observe
from ._providers import ProviderFake
from .conftest import MatrixResults
from .expected import EXPECTED, PROVIDERS, TITLES, Case

KEY = "invoice:inv_42:collect:v1"


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", list(Case), ids=[c.value for c in Case])
def test_cell(
    case: Case,
    provider: str,
    store_url: str,
    make_fake: Callable[[str], ProviderFake],
    matrix_results: MatrixResults,
) -> None:
    expected = EXPECTED[(case, provider)]
    fake = make_fake(provider)
    started = time.monotonic()
    with Ledger.open(store_url) as ledger:
        try:
            observed = observe(case, fake, store_url, ledger, KEY)
        except BaseException as failure:
            matrix_results.record(case, provider, error=f"{type(failure).__name__}: {failure}")
            raise
    seconds = round(time.monotonic() - started, 2)
    matrix_results.record(
        case,
        provider,
        observed=as_json(observed),
        expected=as_json(expected),
        seconds=seconds,
        answers=observed.answers,
        matches=observed.compared() == expected.compared(),
    )
    assert observed.compared() == expected.compared()


def test_every_case_has_a_title_and_a_cell_per_provider() -> None:
    assert set(TITLES) == set(Case)
    assert set(EXPECTED) == {(case, provider) for case in Case for provider in PROVIDERS}


@pytest.mark.parametrize(("case", "provider"), list(EXPECTED), ids=[f"{c.value}-{p}" for c, p in EXPECTED])
def test_the_expected_table_itself_never_promises_a_wrong_receipt(case: Case, provider: str) -> None:
    cell = EXPECTED[(case, provider)]
    assert cell.effects <= 1
    assert cell.requests >= cell.effects
    if cell.status == EffectStatus.CONFIRMED or any("confirmed" in step.outcome for step in cell.steps):
        assert cell.effects == 1
    if cell.status == EffectStatus.UNKNOWN:
        assert cell.settles_by is not None, "an unknown cell says what settles it"
        assert (cell.settles_by == "operator") == (cell.effects == 0)
    else:
        assert cell.settles_by is None
        assert cell.resolution is not None
