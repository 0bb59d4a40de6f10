"""Per-effect cost of the executor's ledger writes (claim + confirm) against the raw minimum.

Raw minimum: one INSERT commit plus one UPDATE commit on the ledger's own table (``raw_pair`` in
_harness.py); the target (executor ÷ raw <= 1.5) is against it. Design floor: the same two commits, each
also writing by hand the audit row the ledger's append-only history needs (``raw_pair(audit=True)``): what
any implementation of this design must write, so executor ÷ design floor is what the implementation adds.
Executor: ``Ledger.execute`` with an adapter that answers instantly, so only the ledger's work
is measured. Both run on SQLite (file, WAL, synchronous=FULL) and PostgreSQL (fresh schema, when reachable),
with 1 and 8 worker processes on distinct keys; then 8 workers on one key (one must dispatch, seven wait and
answer from the ledger). Raw, design floor and executor run as separate slices, alternating three times on the
same worker processes, rather than call by call: each mode's effects/s is its own wall-clock throughput. Each store and
worker count gets an equal share of the time bound.

    .venv/bin/python bench/ledger_overhead.py [--calls 300] [--seconds 40] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import hashlib
import multiprocessing
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

from _harness import StoreTarget, fresh_key, measure, median_ms, parser, raw_pair, store_targets

from safe_effects import (
    EffectRecord,
    EffectRequest,
    IntentKey,
    LeasePolicy,
    Ledger,
    LookupResult,
    LookupStatus,
    ProviderContract,
    Verdict,
)
from safe_effects.testing import generic_contract

CONTRACT = generic_contract()
REQUEST = EffectRequest(operation="charge", params={"amount": 4200, "currency": "eur", "customer": "cus_1"})
WORKER_COUNTS = (1, 8)
ONE_KEY_WORKERS = 8  # after the distinct-key run with this many workers, the same pool races on one key
MODES = ("raw", "design", "executor")
SLICES = 3  # the modes' slices alternate this many times per worker count


class InstantAdapter:
    """Answers at once: what remains is the executor's own cost."""

    provider = "bench"

    def contract_for(self, operation: str) -> ProviderContract:
        return CONTRACT

    def provider_key(self, tenant: str, intent_key: IntentKey) -> str:
        return str(intent_key)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        return "res_" + hashlib.sha1(provider_key.encode()).hexdigest()[:12]

    def classify(self, error: BaseException) -> Verdict:
        raise AssertionError("never fails")

    def result_id(self, response: str) -> str:
        return response

    def response_digest(self, response: str) -> str:
        return response

    def lookup(self, record: EffectRecord) -> LookupResult:
        return LookupResult(LookupStatus.INCONCLUSIVE, "none")


Span = tuple[list[float], float, float]  # per-effect seconds, wall-clock start and end of the measured calls


def _timed(series: Mapping[str, Callable[[], object]], count: int, seconds: float, warmup: int) -> Span:
    measure(series, rounds=0, seconds=seconds, warmup=warmup)
    start = time.time()  # wall clock: comparable across the worker processes
    samples = next(iter(measure(series, rounds=count, seconds=seconds, warmup=0).values()))
    return samples, start, time.time()


def _slice(mode: str, url: str, count: int, seconds: float, shared_key: str | None) -> Span:
    """In a worker process: ``count`` raw pairs (with audit rows for the design floor) or executor calls after
    5 warm-up ones (none on one key)."""
    if mode != "executor":
        with raw_pair(url, audit=mode == "design") as pair:
            return _timed({mode: lambda: pair(fresh_key())}, count, seconds, 5)
    adapter = InstantAdapter()
    lease = LeasePolicy(poll_interval=0.002, wait_for_other=timedelta(seconds=60))
    with Ledger.open(url, lease=lease) as ledger:
        key = shared_key
        series = {mode: lambda: ledger.execute(adapter, REQUEST, intent_key=key or fresh_key("charge"))}
        return _timed(series, count, seconds, 0 if shared_key else 5)


@dataclass
class Tally:
    """One mode's effects over its slices: per-effect seconds and the summed wall-clock span of the slices."""

    samples: list[float] = field(default_factory=list)
    elapsed: float = 0.0

    def add(self, spans: list[Span]) -> None:
        """A slice run by all workers at once: its span runs from the first start to the last end."""
        self.samples.extend(s for part, _, _ in spans for s in part)
        self.elapsed += max(end for _, _, end in spans) - min(start for _, start, _ in spans)

    @property
    def rate(self) -> float:
        return len(self.samples) / self.elapsed if self.elapsed > 0 else float("nan")


def run_slice(
    pool: ProcessPoolExecutor, workers: int, mode: str, url: str, *, count: int, seconds: float, key: str | None = None
) -> list[Span]:
    """One slice: every worker runs :func:`_slice` once, all at the same time."""
    return list(pool.map(_slice, *([arg] * workers for arg in (mode, url, count, seconds, key))))


def compare_modes(pool: ProcessPoolExecutor, workers: int, url: str, calls: int, seconds: float) -> dict[str, Tally]:
    """Each mode's slices alternating ``SLICES`` times on ``workers`` processes (drift hits all alike).

    Effects per second: measured effects over the summed slice spans (each from the first worker's first
    measured call to the last worker's last one: process start-up, connections and warm-up are outside it).
    """
    tallies = {mode: Tally() for mode in MODES}
    for _ in range(SLICES):
        for mode in MODES:
            count, bound = -(-calls // SLICES), seconds / (SLICES * len(MODES))
            tallies[mode].add(run_slice(pool, workers, mode, url, count=count, seconds=bound))
    return tallies


def one_key(pool: ProcessPoolExecutor, workers: int, target: StoreTarget) -> None:
    """``workers`` processes execute the same new intent at once: one dispatches, the others wait for it."""
    key = fresh_key("one-key")
    spans = run_slice(pool, workers, "executor", target.url, count=1, seconds=60.0, key=key)
    one_ms = median_ms([s for part, _, _ in spans for s in part])
    with Ledger.open(target.url) as ledger:
        dispatches = ledger.get(key).attempt_count
    print(f"{target.name:<9} {workers} on one key: median {one_ms:.2f} ms per call, provider dispatches: {dispatches}")


def main() -> None:
    args = parser(__doc__ or "", calls=300).parse_args()
    ctx = multiprocessing.get_context("spawn")
    with store_targets(args.pg) as targets:
        budget = args.seconds / (len(targets) * len(WORKER_COUNTS))
        print(
            f"{'store':<9} {'workers':>7} {'n raw':>6} {'n exec':>6} {'raw ms':>8} {'design ms':>9} {'exec ms':>8} "
            f"{'ratio':>6} {'vs design':>9} {'raw/s':>7} {'exec/s':>7}"
        )
        for target in targets:
            for workers in WORKER_COUNTS:
                with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                    tallies = compare_modes(pool, workers, target.url, args.calls, budget)
                    raw, executor = tallies["raw"], tallies["executor"]
                    raw_ms, exec_ms = median_ms(raw.samples), median_ms(executor.samples)
                    design_ms = median_ms(tallies["design"].samples)
                    print(
                        f"{target.name:<9} {workers:>7} {len(raw.samples):>6} {len(executor.samples):>6} "
                        f"{raw_ms:>8.2f} {design_ms:>9.2f} {exec_ms:>8.2f} {exec_ms / raw_ms:>6.2f} "
                        f"{exec_ms / design_ms:>9.2f} {raw.rate:>7.0f} {executor.rate:>7.0f}"
                    )
                    if workers == ONE_KEY_WORKERS:
                        one_key(pool, workers, target)


if __name__ == "__main__":
    main()
