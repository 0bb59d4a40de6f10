"""Memory per call: what the ledger allocates and keeps, against the raw call it wraps.

Subjects: the executor (``Ledger.execute`` with an instant adapter, against the raw two-commit pair of
_harness.py) and each wrapped client (against its raw SDK call on the same fake or moto server, the same
call builders as the overhead scripts), on each store. For both sides of a subject:

- ``peak``: the most memory Python held above where it started, during one call (tracemalloc), median of n;
- ``kept``: bytes still allocated after n more calls and a full garbage collection, per call. A leak shows as
  a steady positive figure; caches that are bounded and already filled during warm-up do not.

tracemalloc sees Python's own allocations only, not SQLite's page cache or libpq's buffers, so the script
also prints the process's resident-set growth per wrapped call over the same n calls (Linux ``/proc``). On
SQLite that figure includes the page cache filling up as the file grows: it is bounded by ``PRAGMA
cache_size`` (2 MiB per connection by default), so it is expected until then and is not a leak. The verdict
column says ``leak?`` when the wrapped side keeps more than LEAK_BYTES per call.

    .venv/bin/python bench/memory_overhead.py [--calls 150] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tracemalloc
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import sendgrid_overhead
import ses_overhead
import stripe_overhead
from _harness import DEFAULT_PG, Call, Calls, fake_in_own_process, fresh_key, raw_pair, store_targets
from ledger_overhead import REQUEST, InstantAdapter

from safe_effects import Ledger

WARMUP_CALLS = 300  # fills the bounded caches (statement caches, lru caches) before anything is measured
LEAK_BYTES = 100  # kept per call above this, averaged over n calls, is worth a look; one small object is ~50-100


@dataclass(frozen=True, slots=True)
class Footprint:
    peak: float  # median bytes above the starting point during one call
    kept: float  # bytes per call still allocated after n calls and gc.collect()


@dataclass(frozen=True, slots=True)
class Subject:
    """What a benchmark compares: a name, how to serve its provider, how to build raw and wrapped calls."""

    name: str
    server: Callable[[], AbstractContextManager[str]]
    calls: Callable[[str, Ledger], Calls]


def _resident_bytes() -> int | None:
    """This process's resident set size (Linux), or None where /proc is not there."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def peak_bytes(call: Call) -> int:
    """The most memory traced above the starting point while ``call`` ran (tracemalloc must be on)."""
    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    call()
    return tracemalloc.get_traced_memory()[1] - start


def kept_bytes(call: Call, n: int) -> float:
    """Bytes per call still traced after ``n`` calls and a full collection."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(n):
        call()
    gc.collect()
    return (tracemalloc.get_traced_memory()[0] - before) / n


@dataclass(frozen=True, slots=True)
class Comparison:
    """Both sides of one subject on one store, and the resident-set growth per wrapped call."""

    n: int
    raw: Footprint
    safe: Footprint
    rss_per_call: float | None


def compare(raw: Call, wrapped: Call, n: int, warmup: int) -> Comparison:
    """Raw and wrapped footprints (peaks interleaved call by call), after ``warmup`` calls on both sides."""
    for _ in range(warmup):
        raw()
        wrapped()
    peaks: dict[str, list[int]] = {"raw": [], "wrapped": []}
    for _ in range(n):
        peaks["raw"].append(peak_bytes(raw))
        peaks["wrapped"].append(peak_bytes(wrapped))
    raw_kept = kept_bytes(raw, n)
    rss_before = _resident_bytes()
    wrapped_kept = kept_bytes(wrapped, n)
    rss_after = _resident_bytes()
    return Comparison(
        n,
        Footprint(statistics.median(peaks["raw"]), raw_kept),
        Footprint(statistics.median(peaks["wrapped"]), wrapped_kept),
        None if rss_before is None or rss_after is None else (rss_after - rss_before) / n,
    )


def executor_calls(pair: Callable[[str], None], ledger: Ledger) -> Calls:
    """The executor's subject: raw two-commit pair vs ``Ledger.execute`` with an instant adapter."""
    adapter = InstantAdapter()
    return Calls(
        raw=lambda: pair(fresh_key()),
        wrapped=lambda: ledger.execute(adapter, REQUEST, intent_key=fresh_key("charge")),
    )


SUBJECTS = (
    Subject("stripe", lambda: fake_in_own_process("stripe_safe.testing:FakeStripe"), stripe_overhead.calls),
    Subject("sendgrid", lambda: fake_in_own_process("sendgrid_safe.testing:FakeSendGrid"), sendgrid_overhead.calls),
    Subject("ses", ses_overhead.moto_server, ses_overhead.calls),
)

_HEADER = (
    f"{'subject':<9} {'store':<9} {'n':>4} {'raw peak KiB':>12} {'safe peak KiB':>13} {'peak ratio':>10} "
    f"{'raw kept B/call':>15} {'safe kept B/call':>16} {'safe RSS B/call':>15}  verdict"
)


def print_row(subject: str, store: str, result: Comparison) -> None:
    raw, safe = result.raw, result.safe
    verdict = "leak?" if safe.kept > LEAK_BYTES else "no growth"
    rss = "n/a" if result.rss_per_call is None else f"{result.rss_per_call:.0f}"
    print(
        f"{subject:<9} {store:<9} {result.n:>4} {raw.peak / 1024:>12.1f} {safe.peak / 1024:>13.1f} "
        f"{safe.peak / raw.peak:>10.2f} {raw.kept:>15.0f} {safe.kept:>16.0f} {rss:>15}  {verdict}"
    )


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--calls", type=int, default=150, help=f"measured calls per side (after {WARMUP_CALLS} warm-up)")
    cli.add_argument("--warmup", type=int, default=WARMUP_CALLS, help="unmeasured calls per side first")
    cli.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL URL; '' skips PostgreSQL")
    args = cli.parse_args()
    tracemalloc.start()
    print(_HEADER)
    with store_targets(args.pg) as targets:
        for target in targets:
            with Ledger.open(target.url) as ledger, raw_pair(target.url) as pair:
                calls = executor_calls(pair, ledger)
                print_row("executor", target.name, compare(calls.raw, calls.wrapped, args.calls, args.warmup))
        for subject in SUBJECTS:
            with subject.server() as url:
                for target in targets:
                    with Ledger.open(target.url) as ledger:
                        calls = subject.calls(url, ledger)
                        print_row(subject.name, target.name, compare(calls.raw, calls.wrapped, args.calls, args.warmup))


if __name__ == "__main__":
    main()
