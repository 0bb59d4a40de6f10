"""What every ledger benchmark shares: stores, the raw two-commit floor, interleaved timing, one report format.

- :func:`store_targets` yields the stores to run on: a fresh SQLite file (WAL, synchronous=FULL, as the store
  sets it) and, when reachable, a fresh PostgreSQL schema; both migrated first, the schema dropped after.
- :func:`raw_pair` is the raw minimum a ledger write can cost: one INSERT commit plus one UPDATE commit on
  the ledger's own ``effect_intents`` table (same indexes, same durability settings; PostgreSQL autocommit,
  one statement per commit like the store), under a tenant of its own.
- :func:`measure` runs named series interleaved, round-robin with the order rotated every round, so drift and
  noise hit all of them alike; warm-up rounds are discarded and a wall-clock bound stops it early.
- :func:`compare` / :func:`overhead_main` are a provider benchmark end to end: raw SDK call, wrapped call, the
  two-commit floor and a hand-rolled ledger (the floor's two commits around the raw call), interleaved against
  one fake, printed by :func:`print_row` and :func:`print_hand_rolled`.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from safe_effects import Ledger, open_store
from safe_effects._store_url import parse_postgres_url  # the store's own reading of its URL

DEFAULT_PG = os.environ.get("SAFE_EFFECTS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
TARGET = 1.5  # added time per wrapped call / the same store's raw two-commit cost
WARMUP_ROUNDS = 10
RAW, WRAPPED, TWO_COMMITS, HAND_ROLLED = "raw", "wrapped", "two_commits", "hand_rolled"

F = TypeVar("F")
Call = Callable[[], object]


def fresh_key(label: str = "raw") -> str:
    """A new, valid intent key: ``bench:<32 hex>:<label>:v1``."""
    return f"bench:{uuid.uuid4().hex}:{label}:v1"


# -- stores -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreTarget:
    name: str  # "sqlite" or "postgres"
    url: str  # what Ledger.open / open_store / raw_pair take


def _pg_unreachable(pg: str) -> str | None:
    """Why PostgreSQL at ``pg`` cannot be used, or None when it answers."""
    try:
        import psycopg
    except ImportError as error:
        return f"psycopg not installed ({error})"
    try:
        psycopg.connect(parse_postgres_url(pg).conninfo, connect_timeout=3).close()
    except Exception as error:  # any failure to connect is a reason to skip, said aloud
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"{type(error).__name__}: {first_line}"
    return None


def _drop_schema(pg: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(parse_postgres_url(pg).conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def migrate(url: str) -> None:
    """Create (or bring up to date) the ledger's tables at ``url``."""
    store = open_store(url)
    try:
        store.migrate()
    finally:
        store.close()


@contextmanager
def store_targets(pg: str | None) -> Iterator[list[StoreTarget]]:
    """A fresh SQLite file, and a fresh PostgreSQL schema when ``pg`` is reachable; both migrated.

    When PostgreSQL is unreachable (or ``pg`` is empty) it prints why and yields SQLite only. The temporary
    file and the schema are removed afterwards, whatever happens.
    """
    with tempfile.TemporaryDirectory(prefix="se-bench-") as tmp:
        targets = [StoreTarget("sqlite", f"sqlite:///{Path(tmp) / 'ledger.db'}")]
        schema: str | None = None
        if not pg:
            print("postgres   skipped: no --pg URL given")
        elif (reason := _pg_unreachable(pg)) is not None:
            print(f"postgres   skipped: {reason}")
        else:
            schema = f"se_bench_{uuid.uuid4().hex[:10]}"
            targets.append(StoreTarget("postgres", f"{pg}{'&' if '?' in pg else '?'}schema={schema}"))
        try:
            for target in targets:
                migrate(target.url)
            yield targets
        finally:
            if schema is not None and pg:
                _drop_schema(pg, schema)


# -- the raw two-commit floor -------------------------------------------------------------------------------

# The floor writes what a claim and a confirm write, by hand: the same columns with the same kind of values
# (a provider key and a claim token per intent, real timestamps, lease, writer and sender, digests, a
# resolution), so index upkeep and row size are the executor's own. What it leaves out is what the ledger
# adds: validation, encoding, the digest, the executor's decisions. (Until 2026-11-30 each of the ledger's
# commits also carried an audit row, and a "design floor" mode wrote them by hand; since migration v4 a
# routine effect has none.)
_CLAIM_COLUMNS = (
    "tenant_id, intent_key, provider, operation, request_digest, status, version, provider_key, attempt_count, "
    "lease_owner, lease_expires_at, lease_token, summary, created_at, updated_at, updated_by, first_dispatched_at, "
    "dispatched_at, dispatched_by"
)
_DIGEST = "sha256:" + "0" * 64
_LEASE_OWNER = "bench-host:1:0123abcd"


@dataclass(frozen=True, slots=True)
class RawPair:
    """The floor's two commits for one key: ``claim`` (INSERT), ``confirm`` (UPDATE), or both by calling it."""

    claim: Callable[[str], None]
    confirm: Callable[[str], None]

    def __call__(self, key: str) -> None:
        self.claim(key)
        self.confirm(key)


def _sqlite_pair(path: str) -> Iterator[RawPair]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA busy_timeout = 30000")
    now, lease = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')", "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+120 seconds')"
    claim = (
        f"INSERT INTO effect_intents ({_CLAIM_COLUMNS}) VALUES ('bench-raw', ?, 'bench', 'charge', ?, "
        f"'in_flight', 1, ?, 1, ?, {lease}, ?, '{{}}', {now}, {now}, ?, {now}, {now}, ?)"
    )
    confirm = (
        f"UPDATE effect_intents SET status = 'confirmed', version = 2, updated_at = {now}, updated_by = ?, "
        f"lease_owner = NULL, lease_expires_at = NULL, lease_token = NULL, provider_result_id = ?, "
        f"response_digest = ?, resolved_at = {now}, "
        """resolution = '{"method":"provider_response"}' """
        "WHERE tenant_id = 'bench-raw' AND intent_key = ? AND status = 'in_flight' AND version = 1"
    )

    def claim_one(key: str) -> None:
        conn.execute("BEGIN IMMEDIATE")  # as the store writes: a write transaction that takes the lock first
        conn.execute(claim, (key, _DIGEST, key, _LEASE_OWNER, "0123abcd." + key[6:18], _LEASE_OWNER, _LEASE_OWNER))
        conn.execute("COMMIT")

    def confirm_one(key: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(confirm, (_LEASE_OWNER, "res_" + key[6:18], "res_" + key[6:18], key))
        conn.execute("COMMIT")

    try:
        yield RawPair(claim_one, confirm_one)
    finally:
        conn.close()


def _postgres_pair(url: str) -> Iterator[RawPair]:
    import psycopg
    from psycopg import sql

    conninfo, schema, _ = parse_postgres_url(url)
    table = sql.Identifier(schema or "safe_effects", "effect_intents")
    claim = sql.SQL(
        "INSERT INTO {} (" + _CLAIM_COLUMNS + ") VALUES ('bench-raw', %(key)s, 'bench', 'charge', %(digest)s, "
        "'in_flight', 1, %(key)s, 1, %(owner)s, now() + interval '120 seconds', %(token)s, '{{}}', now(), now(), "
        "%(owner)s, now(), now(), %(owner)s)"
    ).format(table)
    confirm = sql.SQL(
        "UPDATE {} SET status = 'confirmed', version = 2, updated_at = now(), updated_by = %(owner)s, "
        "lease_owner = NULL, lease_expires_at = NULL, lease_token = NULL, provider_result_id = %(result)s, "
        """response_digest = %(result)s, resolved_at = now(), resolution = '{{"method":"provider_response"}}' """
        "WHERE tenant_id = 'bench-raw' AND intent_key = %(key)s AND status = 'in_flight' AND version = 1"
    ).format(table)
    conn = psycopg.connect(conninfo, autocommit=True)

    def claim_one(key: str) -> None:
        conn.execute(claim, {"key": key, "digest": _DIGEST, "owner": _LEASE_OWNER, "token": "0123abcd." + key[6:18]})

    def confirm_one(key: str) -> None:
        conn.execute(confirm, {"key": key, "owner": _LEASE_OWNER, "result": "res_" + key[6:18]})

    try:
        yield RawPair(claim_one, confirm_one)
    finally:
        conn.close()


@contextmanager
def raw_pair(store_url: str) -> Iterator[RawPair]:
    """The raw INSERT commit + UPDATE commit for one new key on ``store_url``'s table (see :class:`RawPair`).

    The tables must exist: :func:`store_targets` migrates the stores it yields.
    """
    if store_url.startswith("sqlite:///"):
        yield from _sqlite_pair(store_url[len("sqlite:///") :])
    else:
        yield from _postgres_pair(store_url)


# -- measurement --------------------------------------------------------------------------------------------


def median_ms(samples: list[float]) -> float:
    """Median of per-call seconds, in milliseconds (NaN when there is no sample)."""
    return statistics.median(samples) * 1000 if samples else float("nan")


def measure(
    series: Mapping[str, Call], *, rounds: int, seconds: float, warmup: int = WARMUP_ROUNDS
) -> dict[str, list[float]]:
    """Per-call seconds of each named series, called interleaved.

    One round calls every series once, in an order rotated by one each round (no series always runs right
    after the same other one). ``warmup`` rounds run first and are discarded (connections, statement caches,
    lazy imports); then up to ``rounds`` rounds, stopping early once ``seconds`` have passed since the start,
    but never before one measured round.
    """
    names = list(series)
    samples: dict[str, list[float]] = {name: [] for name in names}
    deadline = time.monotonic() + seconds
    for i in range(warmup + rounds):
        if i > warmup and time.monotonic() > deadline:
            break
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            call = series[name]
            start = time.perf_counter()
            call()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                samples[name].append(elapsed)
    return samples


# -- the provider report ------------------------------------------------------------------------------------

_HEADER = (
    f"{'store':<9} {'n':>4} {'raw SDK ms':>10} {'wrapped ms':>10} {'added ms':>9} {'two-commit ms':>13} "
    f"{'quotient':>8}  target <= {TARGET}"
)
_ROW = re.compile(
    r"^(?P<store>\w+)\s+(?P<n>\d+)\s+(?P<raw>[\d.]+)\s+(?P<wrapped>[\d.]+)\s+(?P<added>-?[\d.]+)\s+"
    r"(?P<commits>[\d.]+)\s+(?P<quotient>-?[\d.]+)\s+(?P<met>yes|no)$"
)


@dataclass(frozen=True, slots=True)
class Row:
    """One printed line of the provider report (also what :func:`parse_rows` reads back)."""

    store: str
    n: int
    raw_ms: float
    wrapped_ms: float
    two_commit_ms: float

    @property
    def added_ms(self) -> float:
        return self.wrapped_ms - self.raw_ms

    @property
    def quotient(self) -> float:
        return self.added_ms / self.two_commit_ms

    @property
    def met(self) -> bool:
        return self.quotient <= TARGET


def print_header() -> None:
    print(_HEADER)


def print_row(row: Row) -> None:
    print(
        f"{row.store:<9} {row.n:>4} {row.raw_ms:>10.3f} {row.wrapped_ms:>10.3f} {row.added_ms:>9.3f} "
        f"{row.two_commit_ms:>13.3f} {row.quotient:>8.2f}  {'yes' if row.met else 'no'}"
    )


def parse_rows(text: str) -> list[Row]:
    """The report rows in a benchmark's output (for bench/report.py)."""
    rows = []
    for line in text.splitlines():
        if match := _ROW.match(line.strip()):
            rows.append(
                Row(
                    store=match["store"],
                    n=int(match["n"]),
                    raw_ms=float(match["raw"]),
                    wrapped_ms=float(match["wrapped"]),
                    two_commit_ms=float(match["commits"]),
                )
            )
    return rows


# -- a provider benchmark end to end ------------------------------------------------------------------------


@dataclass
class Calls:
    """What a provider script supplies per store: each callable makes one call with fresh keys.

    ``extra`` series are measured in the same interleaved rounds and printed under the row as
    ``label: median ms``.
    """

    raw: Call
    wrapped: Call
    extra: dict[str, Call] = field(default_factory=dict)


def compare(target: StoreTarget, calls: Calls, *, rounds: int, seconds: float, pair: RawPair) -> None:
    """Measure raw SDK call, wrapped call, the two-commit floor and a hand-rolled ledger interleaved; print the
    row, then the hand-rolled line (see :func:`print_hand_rolled`) and any extra series."""

    def hand_rolled() -> None:  # what a hand-written ledger pays: its claim, the raw call, its confirm
        key = fresh_key()
        pair.claim(key)
        calls.raw()
        pair.confirm(key)

    series: dict[str, Call] = {
        RAW: calls.raw,
        WRAPPED: calls.wrapped,
        TWO_COMMITS: lambda: pair(fresh_key()),
        HAND_ROLLED: hand_rolled,
    }
    series.update(calls.extra)
    samples = measure(series, rounds=rounds, seconds=seconds)
    row = Row(
        store=target.name,
        n=len(samples[RAW]),
        raw_ms=median_ms(samples[RAW]),
        wrapped_ms=median_ms(samples[WRAPPED]),
        two_commit_ms=median_ms(samples[TWO_COMMITS]),
    )
    print_row(row)
    print_hand_rolled(row, median_ms(samples[HAND_ROLLED]) - row.raw_ms)
    for label in calls.extra:
        print(f"{'':<9} {label}: {median_ms(samples[label]):.3f} ms")


def print_hand_rolled(row: Row, around_ms: float) -> None:
    """The same two commits made around the raw SDK call, as a hand-written ledger makes them: what they add
    there (each runs after HTTP work, with colder caches than the floor's back-to-back pair), and how much of
    the wrapper's added time is left beyond them. A diagnostic: the target divides by the floor alone."""
    print(
        f"{'':<9} hand-rolled (commit, raw call, commit): +{around_ms:.3f} ms over the raw call; "
        f"added ÷ that {row.added_ms / around_ms:.2f}; beyond it {row.added_ms - around_ms:+.3f} ms"
    )


def parser(doc: str, *, calls: int | None = 150, seconds: float = 40.0) -> argparse.ArgumentParser:
    """``--calls`` (unless ``calls`` is None), ``--seconds`` and ``--pg``, with the script's docstring as help."""
    result = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if calls is not None:
        result.add_argument("--calls", type=int, default=calls, help="measured rounds per store (after 10 warm-up)")
    result.add_argument("--seconds", type=float, default=seconds, help="time bound for all stores together")
    result.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL URL; '' skips PostgreSQL")
    return result


@contextmanager
def fake_in_own_process(factory: str) -> Iterator[str]:
    """Serve a fake (``module:Class``, started with ``.start()``) from a child process; yields its URL.

    Like a remote provider, its work then does not share this process's GIL: an in-process fake would bill its
    own handling of the (larger, stamped) wrapped request to the wrapper.
    """
    code = (
        "import importlib, sys; module, _, name = sys.argv[1].partition(':'); "
        "fake = getattr(importlib.import_module(module), name)().start(); print(fake.url, flush=True); "
        "sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, factory], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"{factory} did not start in its own process")
        yield url
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


def overhead_main(
    doc: str, *, fake: Callable[[], AbstractContextManager[F]], calls: Callable[[F, Ledger], Calls]
) -> None:
    """A provider benchmark: start the fake, then per store build the calls and print one report row.

    The raw SDK client and the wrapped client are built by ``calls`` against the same running fake and run
    interleaved with the store's two-commit floor; the time bound is split evenly between the stores.
    """
    args = parser(doc).parse_args()
    with fake() as server, store_targets(args.pg) as targets:
        print_header()
        for target in targets:
            with Ledger.open(target.url) as ledger, raw_pair(target.url) as pair:
                compare(
                    target, calls(server, ledger), rounds=args.calls, seconds=args.seconds / len(targets), pair=pair
                )
