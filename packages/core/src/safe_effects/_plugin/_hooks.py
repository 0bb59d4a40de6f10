"""Hooks: register the marker, validate its options before any fixture runs, note whether the test body failed."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from ._options import SafeEffectsOptions
from ._stores import PG_URL_ENV

OPTIONS = pytest.StashKey[SafeEffectsOptions]()
CALL_FAILED = pytest.StashKey[bool]()

MARKER = (
    "safe_effects(*, store='auto'|'sqlite'|'postgres', assert_all_fired=True, crash_at=(), cassette_dir=None): "
    "per-test options of the safe-effects plugin"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which store ``store='auto'`` tests get, so a silent fall-back to SQLite is visible in every run."""
    if os.environ.get(PG_URL_ENV):
        return f"safe-effects: store='auto' uses PostgreSQL ({PG_URL_ENV} is set)"
    return f"safe-effects: store='auto' falls back to SQLite ({PG_URL_ENV} is unset)"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Parse the options once per test, so a typo fails even a test that uses none of the fixtures."""
    markers = [(m.args, m.kwargs) for m in item.iter_markers("safe_effects")]
    try:
        item.stash[OPTIONS] = SafeEffectsOptions.from_markers(markers)
    except (TypeError, ValueError) as bad:
        pytest.fail(str(bad), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test body is reported on its own, and a skipped or xfailed one ended early (its faults may
    never have had their turn): teardown checks then stay quiet instead of piling on."""
    report = yield
    if report.when == "call" and (report.failed or report.skipped):  # an xfail is reported skipped
        item.stash[CALL_FAILED] = True
    return report
