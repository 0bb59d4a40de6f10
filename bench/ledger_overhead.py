"""Per-effect cost of the executor's ledger writes (claim + confirm) against the raw minimum.

Raw minimum: one INSERT commit plus one UPDATE commit on the ledger's own table (``raw_pair`` in
_harness.py), writing the columns a claim and a confirm write; the target (executor ÷ raw <= 1.5) is against
it. Executor: ``Ledger.execute`` with an adapter that answers instantly, so only the ledger's work
is measured. Both run on SQLite (file, WAL, synchronous=FULL) and PostgreSQL (fresh schema, when reachable),
with 1 and 8 worker processes on distinct keys; then 8 workers on one key (one must dispatch, seven wait and
answer from the ledger). Raw and executor run as separate slices, alternating three times on the
same worker processes, rather than call by call: each mode's effects/s is its own wall-clock throughput. Each store and
worker count gets an equal share of the time bound, split into slices of equal length.

A slice is a window in which every worker runs at once: each connects and warms up, they meet at a barrier,
and each calls until the window closes, so every measured call ran under the full contention of its worker
count. (A worker that made a fixed number of calls as soon as it was ready measured with less: on SQLite the
workers of a raw slice then ran mostly one after another.)

    .venv/bin/python bench/ledger_overhead.py [--seconds 40] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import hashlib
import multiprocessing
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.synchronize import Barrier

from _harness import StoreTarget, fresh_key, median_ms, parser, raw_pair, store_targets

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
MODES = ("raw", "executor")
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
_TOGETHER: Barrier | None = None  # in a worker process: where the workers of a slice meet (set by _join)


def _join(together: Barrier) -> None:
    global _TOGETHER  # noqa: PLW0603  # a pool initializer's only way to hand its worker a shared object
    _TOGETHER = together


def _timed(call: Callable[[], object], *, seconds: float, warm: bool = True, once: bool = False) -> Span:
    """Warm up, wait for the other workers, then call until ``seconds`` have passed (or once).

    The warm-up lasts a quarter of the window: a new connection's first hundred or so commits are slower
    (SQLite's page cache starts empty; measured: the first 100 after 5 warm-up calls had a median of
    0.5-0.8 ms, the rest 0.35), and a window that began with them would measure the connection, not the
    steady state a long-running worker lives in.
    """
    warm_until = time.monotonic() + seconds / 4
    while warm and time.monotonic() < warm_until:
        call()
    assert _TOGETHER is not None, "runs in a worker of workers_pool"
    _TOGETHER.wait()
    samples: list[float] = []
    start, deadline = time.time(), time.monotonic() + seconds  # wall clock: comparable across processes
    while not samples or (not once and time.monotonic() < deadline):
        began = time.perf_counter()
        call()
        samples.append(time.perf_counter() - began)
    return samples, start, time.time()


def _slice(mode: str, url: str, seconds: float, shared_key: str | None) -> Span:
    """In a worker process: raw pairs or executor calls for ``seconds`` after a warm-up; with ``shared_key``,
    one executor call on that key and no warm-up."""
    if mode == "raw":
        with raw_pair(url) as pair:
            return _timed(lambda: pair(fresh_key()), seconds=seconds)
    adapter = InstantAdapter()
    lease = LeasePolicy(poll_interval=0.002, wait_for_other=timedelta(seconds=60))
    with Ledger.open(url, lease=lease) as ledger:

        def effect() -> object:
            return ledger.execute(adapter, REQUEST, intent_key=shared_key or fresh_key("charge"))

        return _timed(effect, seconds=seconds, warm=shared_key is None, once=shared_key is not None)


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


@dataclass(frozen=True)
class Workers:
    """A pool of ``count`` worker processes whose every slice starts at one barrier."""

    pool: ProcessPoolExecutor
    count: int

    def run_slice(self, mode: str, url: str, *, seconds: float, key: str | None = None) -> list[Span]:
        """Every worker runs :func:`_slice` once; their measured calls start together."""
        return list(self.pool.map(_slice, *([arg] * self.count for arg in (mode, url, seconds, key))))


@contextmanager
def workers_pool(count: int) -> Iterator[Workers]:
    """``count`` spawned worker processes sharing a barrier.

    A task waits at the barrier holding its worker, so the ``count`` tasks of a slice run on ``count``
    distinct processes.
    """
    ctx = multiprocessing.get_context("spawn")
    together = ctx.Barrier(count, timeout=120)  # a worker that died shows as BrokenBarrierError, not a hang
    with ProcessPoolExecutor(count, mp_context=ctx, initializer=_join, initargs=(together,)) as pool:
        yield Workers(pool, count)


def compare_modes(workers: Workers, url: str, seconds: float) -> dict[str, Tally]:
    """Each mode's slices alternating ``SLICES`` times on the same processes (drift hits all alike).

    Effects per second: measured effects over the summed slice spans (each from the first worker's first
    measured call to the last worker's last one: process start-up, connections and warm-up are outside it).
    """
    tallies = {mode: Tally() for mode in MODES}
    window = seconds / (SLICES * len(MODES))
    for _ in range(SLICES):
        for mode in MODES:
            tallies[mode].add(workers.run_slice(mode, url, seconds=window))
    return tallies


def one_key(workers: Workers, target: StoreTarget) -> None:
    """The workers execute the same new intent at once: one dispatches, the others wait for it."""
    key = fresh_key("one-key")
    spans = workers.run_slice("executor", target.url, seconds=0.0, key=key)
    one_ms = median_ms([s for part, _, _ in spans for s in part])
    with Ledger.open(target.url) as ledger:
        dispatches = ledger.get(key).attempt_count
    print(
        f"{target.name:<9} {workers.count} on one key: median {one_ms:.2f} ms per call, "
        f"provider dispatches: {dispatches}"
    )


def tail(tallies: dict[str, Tally]) -> str:
    """The slowest 1% of each mode's calls, and its slowest call: what a median hides (SQLite's writers wait
    for the lock in growing sleeps, so a few calls wait far longer than the median one)."""
    slowest = {mode: sorted(tally.samples) for mode, tally in tallies.items()}
    p99 = ", ".join(f"{mode} {s[min(len(s) - 1, len(s) * 99 // 100)] * 1000:.2f}" for mode, s in slowest.items())
    longest = ", ".join(f"{s[-1] * 1000:.1f}" for s in slowest.values())
    return f"99th percentile ms: {p99}; longest call ms: {longest}"


def main() -> None:
    args = parser(__doc__ or "", calls=None).parse_args()
    with store_targets(args.pg) as targets:
        budget = args.seconds / (len(targets) * len(WORKER_COUNTS))
        print(
            f"{'store':<9} {'workers':>7} {'n raw':>6} {'n exec':>6} {'raw ms':>8} {'exec ms':>8} "
            f"{'ratio':>6} {'raw/s':>7} {'exec/s':>7}"
        )
        for target in targets:
            for count in WORKER_COUNTS:
                with workers_pool(count) as workers:
                    tallies = compare_modes(workers, target.url, budget)
                    raw, executor = tallies["raw"], tallies["executor"]
                    raw_ms, exec_ms = median_ms(raw.samples), median_ms(executor.samples)
                    print(
                        f"{target.name:<9} {count:>7} {len(raw.samples):>6} {len(executor.samples):>6} "
                        f"{raw_ms:>8.2f} {exec_ms:>8.2f} {exec_ms / raw_ms:>6.2f} "
                        f"{raw.rate:>7.0f} {executor.rate:>7.0f}"
                    )
                    print(f"{target.name:<9} {count:>7} {tail(tallies)}")
                    if count == ONE_KEY_WORKERS:
                        one_key(workers, target)


if __name__ == "__main__":
    main()
