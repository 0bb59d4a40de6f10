"""The core fixtures: options, a fault watch checked at teardown, a clock, a store, a ledger, crash kit, cassettes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from safe_effects._crash import CrashPlan
from safe_effects._ledger import Ledger
from safe_effects._policies import LeasePolicy, RetryPolicy
from safe_effects.testing._cassettes import CassetteReplay, fault_cassette
from safe_effects.testing._clock import FakeClock
from safe_effects.testing._crash_kit import CrashKit
from safe_effects.testing._watch import FaultWatch

from ._hooks import CALL_FAILED, OPTIONS
from ._options import SafeEffectsOptions
from ._stores import PG_URL_ENV, on_ci, temporary_store_url

FAST_RETRY = RetryPolicy(initial_wait=0.0, max_wait=0.1)  # no back-off; a Retry-After over 0.1 s defers
QUICK_POLL = LeasePolicy(poll_interval=0.01)
OPT_OUT = "@pytest.mark.safe_effects(assert_all_fired=False)"


@pytest.fixture
def safe_options(request: pytest.FixtureRequest) -> SafeEffectsOptions:
    """This test's ``@pytest.mark.safe_effects(...)`` options, already validated."""
    options: SafeEffectsOptions = request.node.stash.get(OPTIONS, SafeEffectsOptions())
    return options


@pytest.fixture
def safe_faults(request: pytest.FixtureRequest, safe_options: SafeEffectsOptions) -> Iterator[FaultWatch]:
    """Faults and traps set up by this test; any that never fired fails it at teardown (the pytest_httpx way)."""
    watch = FaultWatch()
    yield watch
    if not safe_options.assert_all_fired or request.node.stash.get(CALL_FAILED, False):
        return
    unfired = watch.unfired()
    if unfired:
        listed = "\n".join(f"  - {line}" for line in unfired)
        pytest.fail(
            f"{len(unfired)} fault(s) set up by this test never fired, or not as often as set up:\n{listed}\n"
            f"remove them, or opt out with {OPT_OUT}",
            pytrace=False,
        )


@pytest.fixture
def safe_clock() -> FakeClock:
    """The ledger's and the fakes' clock: starts at the real time (as worker processes see it), moves when told."""
    return FakeClock(datetime.now(UTC))


@pytest.fixture
def safe_store_url(safe_options: SafeEffectsOptions, tmp_path: Path) -> Iterator[str]:
    """A migrated store for this test only: SQLite in tmp_path, or a PostgreSQL schema dropped afterwards."""
    pg_url = os.environ.get(PG_URL_ENV) or None
    kind = safe_options.store
    if kind == "auto":
        kind = "postgres" if pg_url else "sqlite"
    if kind == "postgres" and pg_url is None:
        message = f"store='postgres' needs {PG_URL_ENV}"
        if on_ci():  # PostgreSQL tests are mandatory on CI: a missing database must not pass as a skip
            pytest.fail(f"{message} (CI is set: a PostgreSQL test fails instead of skipping)", pytrace=False)
        pytest.skip(message)
    with temporary_store_url(kind, tmp_path, pg_url) as url:
        yield url


@pytest.fixture
def safe_ledger(
    safe_store_url: str, safe_clock: FakeClock, safe_options: SafeEffectsOptions, safe_faults: FaultWatch
) -> Iterator[Ledger]:
    """A ledger on ``safe_store_url`` and ``safe_clock``: no retry waits, crash points from the marker's crash_at
    (a point never hit fails teardown like an unfired fault)."""
    crash_plan = CrashPlan.crash_at(*safe_options.crash_at)
    safe_faults.watch("safe_ledger crash_at", lambda: [p.value for p in crash_plan.unfired()])
    ledger = Ledger.open(safe_store_url, clock=safe_clock, retry=FAST_RETRY, lease=QUICK_POLL, crash_plan=crash_plan)
    yield ledger
    ledger.close()


@pytest.fixture
def safe_crash(safe_faults: FaultWatch) -> Iterator[CrashKit]:
    """Crash plans, worker environments and traps on fakes; traps are disarmed after the test and must have fired."""
    kit = CrashKit()
    safe_faults.watch("safe_crash", kit.pending)
    yield kit
    kit.disarm()


@pytest.fixture
def safe_cassette(
    request: pytest.FixtureRequest, safe_options: SafeEffectsOptions, safe_faults: FaultWatch
) -> Callable[..., AbstractContextManager[CassetteReplay]]:
    """``fault_cassette`` with names resolved in the marker's cassette_dir (default: <test dir>/cassettes)."""
    directory = request.path.parent / (safe_options.cassette_dir or "cassettes")

    @contextmanager
    def use(name: str | os.PathLike[str], **options: Any) -> Iterator[CassetteReplay]:
        with fault_cassette(directory / name, **options) as replay:
            safe_faults.watch(f"cassette {os.fspath(name)}", replay.unfired)
            yield replay

    return use
