"""Where an effect's CPU goes: this process's and a local PostgreSQL's, per effect, for the raw pair and the executor.

One process, one mode at a time (alternating slices, median of the slices): the raw two-commit pair and
``Ledger.execute`` with an adapter that answers at once.
It explains the 8-worker rows of ledger_overhead.py, which differ by store:

- PostgreSQL: 8 workers on a 2-core machine run the cores flat out, and per-effect latency then follows the
  CPU an effect costs, client and server together. The reading line prints the budget the executor target
  (<= 1.5 x raw) leaves once the cores are saturated: half the raw pair's CPU, what the ledger may add to
  the two commits; next to it, what it adds.
- SQLite: writers take turns on one write lock, so the 8-worker ratio follows wall time per effect. The
  store also runs as ``sqlite-ram`` in a RAM-backed directory (/dev/shm), where fsync returns at once: the
  same Python costs less there, which shows how much dearer the executor's code runs next to each fsync.

Client CPU is this process's (``time.process_time``, every thread; with SQLite it includes the kernel's fsync
work). Server CPU is the sum over the local ``postgres`` processes in /proc (backends, WAL writer,
checkpointer), so it needs PostgreSQL on this machine and no other client busy meanwhile; elsewhere it prints
``-``.

    .venv/bin/python bench/cpu_split.py [--calls 1000] [--slices 3] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from _harness import DEFAULT_PG, TARGET, StoreTarget, fresh_key, migrate, raw_pair, store_targets
from ledger_overhead import REQUEST, InstantAdapter

from safe_effects import Ledger
from safe_effects._store_url import parse_postgres_url

MODES = ("raw", "executor")
WARMUP = 20  # effects per slice before its clock starts (statement caches, prepared statements)
RAM_DIR = Path("/dev/shm")
LOCAL_HOSTS = frozenset({"", "127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True, slots=True)
class Cost:
    """One mode's median per-effect cost, in microseconds (server None where it cannot be read)."""

    client: float
    server: float | None
    wall: float

    @property
    def total(self) -> float:
        return self.client + (self.server or 0.0)


def postgres_cpu_seconds() -> float:
    """User + system CPU seconds of every process named ``postgres*`` on this machine, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended between the listing and the read
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if name.startswith("postgres"):
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def server_clock(url: str) -> Callable[[], float] | None:
    """A reader of the store's server CPU seconds, or None where there is no local server to read."""
    if url.startswith("sqlite:///"):
        return None
    host = _conninfo_host(parse_postgres_url(url).conninfo)
    if (host not in LOCAL_HOSTS and not host.startswith("/")) or postgres_cpu_seconds() == 0:
        return None
    return postgres_cpu_seconds


def _conninfo_host(conninfo: str) -> str:
    import psycopg

    return psycopg.conninfo.conninfo_to_dict(conninfo).get("host") or ""  # type: ignore[return-value]


@contextmanager
def calls(url: str) -> Iterator[dict[str, Callable[[], object]]]:
    """One effect of each mode on ``url``, as callables."""
    adapter = InstantAdapter()
    with ExitStack() as stack:
        pair = stack.enter_context(raw_pair(url))
        ledger = stack.enter_context(Ledger.open(url))
        yield {
            "raw": lambda: pair(fresh_key()),
            "executor": lambda: ledger.execute(adapter, REQUEST, intent_key=fresh_key("charge")),
        }


def measure(url: str, count: int, slices: int) -> dict[str, Cost]:
    """Median per-effect client, server and wall time of each mode over ``slices`` alternating slices."""
    server = server_clock(url)
    samples: dict[str, list[tuple[float, float | None, float]]] = {mode: [] for mode in MODES}
    with calls(url) as modes:
        for index in range(slices):
            order = MODES[index % len(MODES) :] + MODES[: index % len(MODES)]
            for mode in order:
                call = modes[mode]
                for _ in range(WARMUP):
                    call()
                server_start = server() if server else 0.0
                client_start, wall_start = time.process_time(), time.perf_counter()
                for _ in range(count):
                    call()
                client, wall = time.process_time() - client_start, time.perf_counter() - wall_start
                used = server() - server_start if server else None
                samples[mode].append((client / count, None if used is None else used / count, wall / count))
    return {mode: _median(values) for mode, values in samples.items()}


def _median(values: list[tuple[float, float | None, float]]) -> Cost:
    servers = [v[1] for v in values if v[1] is not None]
    return Cost(
        client=statistics.median(v[0] for v in values) * 1e6,
        server=statistics.median(servers) * 1e6 if servers else None,
        wall=statistics.median(v[2] for v in values) * 1e6,
    )


def print_rows(store: str, count: int, costs: dict[str, Cost]) -> None:
    for mode, cost in costs.items():
        server = "-" if cost.server is None else f"{cost.server:.0f}"
        print(f"{store:<11} {mode:<9} {count:>5} {cost.client:>9.0f} {server:>9} {cost.total:>8.0f} {cost.wall:>8.0f}")


def cpu_reading(costs: dict[str, Cost]) -> str:
    """A server store's CPU budget: what the executor target leaves over the raw pair once CPU-bound."""
    raw, executor = (costs[mode].total for mode in MODES)
    return (
        f"client + server CPU per effect: raw {raw:.0f} us, executor {executor:.0f} us (executor/raw "
        f"{executor / raw:.2f}); with the cores saturated latency follows CPU, and the target (<= {TARGET} x raw) "
        f"leaves {(TARGET - 1) * raw:.0f} us over the raw pair: the executor uses {executor - raw:.0f} us"
    )


def fsync_reading(disk: dict[str, Cost], ram: dict[str, Cost]) -> str:
    """How much more the executor's own CPU (over the raw pair) costs next to fsync than on RAM."""
    on_disk = disk["executor"].client - disk["raw"].client
    on_ram = ram["executor"].client - ram["raw"].client
    return (
        f"the executor's CPU over the raw pair: {on_disk:.0f} us with fsync, {on_ram:.0f} us on RAM "
        f"(x{on_disk / on_ram:.1f}); writers take turns on one lock, so at 8 workers the ratio follows "
        f"wall time per effect (executor/raw {disk['executor'].wall / disk['raw'].wall:.2f} here)"
    )


@contextmanager
def ram_store() -> Iterator[StoreTarget | None]:
    """A migrated SQLite file in a RAM-backed directory, or None where there is none."""
    if not (RAM_DIR.is_dir() and os.access(RAM_DIR, os.W_OK)):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="se-bench-", dir=RAM_DIR) as tmp:
        target = StoreTarget("sqlite-ram", f"sqlite:///{Path(tmp) / 'ledger.db'}")
        migrate(target.url)
        yield target


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--calls", type=int, default=1000, help="measured effects per slice")
    cli.add_argument("--slices", type=int, default=3, help="alternating slices per mode (median taken)")
    cli.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL URL; '' skips PostgreSQL")
    args = cli.parse_args()
    with store_targets(args.pg) as targets, ram_store() as ram:
        stores = [*targets, *([ram] if ram else [])]
        print(f"{'store':<11} {'mode':<9} {'n':>5} {'client us':>9} {'server us':>9} {'total us':>8} {'wall us':>8}")
        measured = {}
        for target in stores:
            measured[target.name] = measure(target.url, args.calls, args.slices)
            print_rows(target.name, args.calls, measured[target.name])
        print()
        if "sqlite-ram" in measured:
            print(f"{'sqlite':<11} {fsync_reading(measured['sqlite'], measured['sqlite-ram'])}")
        if "postgres" in measured:
            costs = measured["postgres"]
            if costs["raw"].server is None:
                print(f"{'postgres':<11} server CPU not readable (PostgreSQL is not on this machine): no budget")
            else:
                print(f"{'postgres':<11} {cpu_reading(costs)}")


if __name__ == "__main__":
    main()
