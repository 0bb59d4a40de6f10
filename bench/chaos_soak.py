"""Chaos soak: many intents through worker processes that keep getting SIGKILLed, and PostgreSQL restarted.

    .venv/bin/python bench/chaos_soak.py [--intents 2000] [--workers 4] [--pg-outage restart|terminate|none]
                                        [--doc docs/failure-matrix.md]

The parent runs FakeStripe (real HTTP on 127.0.0.1) and hands intent keys, one at a time, to worker
processes (this file with ``--worker``: a real ``stripe_safe.StripeClient`` over a PostgreSQL ledger in a
schema of its own). Chaos, all at once:

- a timer SIGKILLs a random worker every ``--kill-every`` seconds on average (anywhere: idle, mid-call, mid-commit);
- FakeStripe's hooks SIGKILL the worker whose request just arrived (``after_dispatch``) or was just committed
  (``after_provider_accept``), each with probability ``--hook-kill-rate``;
- each worker SIGKILLs itself at ``before_dispatch``, ``after_response`` and ``during_receipt_persist`` with
  probability ``--crash-rate`` per point (a random CrashPlan);
- halfway through, PostgreSQL is restarted (``pg_ctlcluster ... restart``); ``--pg-outage terminate`` cuts only
  the soak's own connections instead (safe while others use the server), ``--no-pg-restart`` skips it.

A killed worker is restarted; its intent goes back in the queue, and so does every intent whose caller got
anything but ``confirmed`` (unknown, in progress, deferred, a database error while PostgreSQL was down) — the
way a job queue retries. Each intent gets ``--max-attempts`` calls; then a reconcile pass (lookups, never
dispatches) settles what is left. The audit counts, from FakeStripe's own objects: provider effects,
duplicates (two PaymentIntents for one intent), lost intents (no ledger record, or confirmed without its
PaymentIntent) and unknowns left. Target: 0 duplicates and 0 lost intents.

FakeStripe dedupes by Idempotency-Key, as Stripe does: the soak checks the whole system a Stripe user runs
(ledger + Stripe's 24 h key), not the ledger alone; the failure matrix (tests/failure_matrix) covers the
non-deduping providers cell by cell. Not part of the test suite: it restarts the shared PostgreSQL.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import heapq
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
API_KEY = "sk_test_chaos_soak"
SOAK_BEGIN = "<!-- chaos-soak:begin -->"
SOAK_END = "<!-- chaos-soak:end -->"


# -- the worker process ---------------------------------------------------------------------------------


def worker_main(args: argparse.Namespace) -> int:
    """Read intent keys from stdin, one call each, one JSON answer per line; never die of an error."""
    from safe_effects import (
        CrashPlan,
        CrashPoint,
        EffectOutcome,
        LeasePolicy,
        Ledger,
        RetryPolicy,
        SafeEffectsError,
    )
    from stripe_safe import StripeClient

    @dataclasses.dataclass(frozen=True, slots=True)
    class RandomCrashPlan(CrashPlan):
        """SIGKILL this process at a planned point with probability ``rate``."""

        rate: float = 0.0

        def hit(self, point: CrashPoint) -> None:
            if point in self.at and random.random() < self.rate:
                os.kill(os.getpid(), signal.SIGKILL)

    points = frozenset({CrashPoint.BEFORE_DISPATCH, CrashPoint.AFTER_RESPONSE, CrashPoint.DURING_RECEIPT_PERSIST})
    crash = RandomCrashPlan(points, "sigkill", rate=args.crash_rate)
    ledger: Ledger | None = None
    deadline = time.monotonic() + 60
    while ledger is None:  # PostgreSQL may be restarting right now: wait for it, visibly
        try:
            ledger = Ledger.open(
                args.store,
                crash_plan=crash,
                lease=LeasePolicy(
                    duration=timedelta(seconds=args.lease_seconds),
                    wait_for_other=timedelta(seconds=args.lease_seconds * 1.5),
                    poll_interval=0.02,
                ),
                retry=RetryPolicy(max_attempts=3, max_total_seconds=5.0, initial_wait=0.05, max_wait=0.2),
            )
        except Exception as error:
            if time.monotonic() > deadline:
                raise
            print(json.dumps({"starting": f"{type(error).__name__}"}), file=sys.stderr, flush=True)
            time.sleep(0.5)
    client = StripeClient(API_KEY, ledger=ledger, base_addresses={"api": args.fake_url}, timeout=(2.0, 5.0))
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        key = line.strip()
        answer: dict[str, Any] = {"key": key}
        try:
            intent = client.v1.payment_intents.create(
                params={"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True},
                options={"idempotency_key": key},
            )
            answer |= {"outcome": "confirmed", "id": intent.id}
        except EffectOutcome as outcome:
            answer |= {"outcome": outcome.code}
        except SafeEffectsError as error:  # LeaseLost: another worker took over; the queue retries
            answer |= {"outcome": error.code}
        except Exception as error:  # PostgreSQL down, pool timeout...: fail this intent visibly, keep going
            answer |= {"outcome": "error", "error": type(error).__name__}
            time.sleep(0.2)
        print(json.dumps(answer), flush=True)
    ledger.close()
    return 0


# -- the parent: queue, slots, chaos ----------------------------------------------------------------------


@dataclasses.dataclass
class Figures:
    intents: int = 0
    calls: int = 0
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    kills: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    worker_starts: int = 0
    requeued: int = 0
    pg_restart: dict[str, Any] = dataclasses.field(default_factory=dict)
    attempts_exhausted: int = 0
    elapsed: float = 0.0
    deadline_hit: bool = False
    worker_log: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def as_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # asdict breaks Counters

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figures:
        counters = {"outcomes", "kills", "worker_log"}
        fields: dict[str, Any] = {k: collections.Counter(v) if k in counters else v for k, v in data.items()}
        return cls(**fields)


class WorkQueue:
    """Keys due now, keys due later (after a kill or a non-final answer), and the confirmed ones."""

    def __init__(self, keys: list[str], max_attempts: int) -> None:
        self._lock = threading.Condition()
        self._due: collections.deque[str] = collections.deque(keys)
        self._later: list[tuple[float, str]] = []
        self._attempts: collections.Counter[str] = collections.Counter()
        self.max_attempts = max_attempts
        self.total = len(keys)
        self.confirmed: dict[str, str] = {}
        self.given_up: set[str] = set()
        self.stopped = False

    def take(self) -> str | None:
        """The next key to call, waiting for a delayed one if needed; None when every key is finished."""
        with self._lock:
            while True:
                now = time.monotonic()
                while self._later and self._later[0][0] <= now:
                    self._due.append(heapq.heappop(self._later)[1])
                if self._due:
                    key = self._due.popleft()
                    self._attempts[key] += 1
                    return key
                if self.stopped or len(self.confirmed) + len(self.given_up) >= self.total:
                    return None
                self._lock.wait(timeout=(self._later[0][0] - now) if self._later else 0.1)

    def finish(self, key: str, result_id: str) -> None:
        with self._lock:
            self.confirmed[key] = result_id
            self._lock.notify_all()

    def retry(self, key: str, after: float) -> bool:
        """Back in the queue after ``after`` seconds, unless its attempts are used up (reconcile pass then)."""
        with self._lock:
            if self._attempts[key] >= self.max_attempts:
                self.given_up.add(key)
                self._lock.notify_all()
                return False
            heapq.heappush(self._later, (time.monotonic() + after, key))
            self._lock.notify_all()
            return True

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            self._lock.notify_all()

    @property
    def done(self) -> int:
        with self._lock:
            return len(self.confirmed) + len(self.given_up)


class Slot:
    """One worker process seat: (re)starts the worker, feeds it keys, notices when it was killed."""

    def __init__(self, index: int, soak: Soak) -> None:
        self.index, self.soak = index, soak
        self.process: subprocess.Popen[str] | None = None
        self.current: str | None = None
        self.lock = threading.Lock()

    def start(self) -> subprocess.Popen[str]:
        args = self.soak.args
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--store",
            self.soak.store_url,
            "--fake-url",
            self.soak.fake_url,
            "--lease-seconds",
            str(args.lease_seconds),
            "--crash-rate",
            str(args.crash_rate),
        ]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.soak.log, text=True, bufsize=1
        )
        assert process.stdout is not None
        ready = process.stdout.readline()  # empty if it was killed (or crashed) while starting
        with self.lock:
            self.process = process
        self.soak.count_start()
        if not ready:
            self.soak.reap(process)
            raise ChildProcessError("worker died while starting")
        return process

    def pid(self) -> int | None:
        with self.lock:
            return self.process.pid if self.process is not None and self.process.poll() is None else None

    def run(self) -> None:
        queue, process = self.soak.queue, None
        while True:
            key = queue.take()
            if key is None:
                break
            failures = 0
            while process is None or process.poll() is not None:
                try:
                    process = self.start()
                except ChildProcessError:
                    process, failures = None, failures + 1
                    if failures > 50:
                        raise RuntimeError(f"workers keep dying while starting: see {self.soak.log.name}") from None
            answer = self._call(process, key)
            if answer is None:  # SIGKILLed mid-call (or between calls): the intent goes back
                self.soak.reap(process)
                self.soak.count("no answer: worker killed")
                self.soak.requeue(key, after=self.soak.args.lease_seconds)
                process = None
                continue
            self.soak.answered(key, answer)
        if process is not None and process.stdin is not None:
            process.stdin.close()
            process.wait(timeout=30)

    def _call(self, process: subprocess.Popen[str], key: str) -> dict[str, Any] | None:
        assert process.stdin is not None
        assert process.stdout is not None
        with self.lock:
            self.current = key
        try:
            process.stdin.write(key + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        finally:
            with self.lock:
                self.current = None
        return json.loads(line) if line else None


class Soak:
    def __init__(self, args: argparse.Namespace, store_url: str, fake_url: str, keys: list[str]) -> None:
        self.args, self.store_url, self.fake_url = args, store_url, fake_url
        self.queue = WorkQueue(keys, args.max_attempts)
        self.figures = Figures(intents=len(keys))
        self.slots = [Slot(i, self) for i in range(args.workers)]
        self.rng = random.Random(args.seed)
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.killed_pids: set[int] = set()
        self.log = open(args.log, "a")  # noqa: SIM115 - workers' stderr for the whole run, closed in parent_main
        self.log_start = self.log.tell()

    def count_start(self) -> None:
        with self._lock:
            self.figures.worker_starts += 1

    def count(self, outcome: str) -> None:
        with self._lock:
            self.figures.outcomes[outcome] += 1

    def reap(self, process: subprocess.Popen[str]) -> None:
        """Wait for a dead worker; a SIGKILL the parent did not send came from the worker's own crash plan."""
        process.wait()
        with self._lock:
            if process.returncode == -signal.SIGKILL and process.pid not in self.killed_pids:
                self.figures.kills["worker crash point"] += 1

    def requeue(self, key: str, *, after: float) -> None:
        with self._lock:
            self.figures.requeued += 1
        if not self.queue.retry(key, after):
            with self._lock:
                self.figures.attempts_exhausted += 1

    def answered(self, key: str, answer: dict[str, Any]) -> None:
        outcome = str(answer.get("outcome"))
        if outcome == "error":
            outcome = f"error:{answer.get('error')}"
        with self._lock:
            self.figures.calls += 1
            self.figures.outcomes[outcome] += 1
        if outcome == "confirmed":
            self.queue.finish(key, str(answer["id"]))
        else:
            self.requeue(key, after=0.5)

    def kill(self, pid: int | None, why: str) -> None:
        if pid is None:
            return
        with self._lock:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.killed_pids.add(pid)
            self.figures.kills[why] += 1

    # hooks of FakeStripe's HTTP server: they run in its handler threads

    def _slot_of(self, key: str | None) -> Slot | None:
        return next((s for s in self.slots if key is not None and s.current == key), None)

    def hook(self, why: str) -> Any:
        def kill_sender(request: Any) -> None:
            if request.method != "POST" or self.rng.random() >= self.args.hook_kill_rate:
                return
            slot = self._slot_of(request.header("idempotency-key"))
            if slot is not None:
                self.kill(slot.pid(), why)

        return kill_sender

    def chaos_timer(self) -> None:
        while not self.stop.wait(self.rng.expovariate(1 / self.args.kill_every)):
            self.kill(self.rng.choice(self.slots).pid(), "timer")

    def pg_outage(self) -> None:
        """Halfway: restart PostgreSQL, or (``terminate``) cut only this soak's own connections."""
        while not self.stop.wait(0.05):
            if self.queue.done >= self.figures.intents // 2:
                break
        if self.stop.is_set():
            return
        started = time.monotonic()
        if self.args.pg_outage == "restart":
            version = sorted(os.listdir("/etc/postgresql"))[-1]
            command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            what, code, detail = f"`{' '.join(command)}`", done.returncode, done.stderr.strip()[-300:]
        else:
            what, code, detail = "pg_terminate_backend on this soak's connections", 0, str(self._terminate())
        self.figures.pg_restart = {
            "at_done": self.queue.done,
            "seconds": round(time.monotonic() - started, 2),
            "exit": code,
            "what": what,
            "detail": detail,
        }

    def _terminate(self) -> int:
        """Kill the server side of every connection that touched this soak's schema; nobody else's."""
        import psycopg

        schema = self.store_url.rsplit("schema=", 1)[1]
        with psycopg.connect(self.args.pg, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND strpos(query, %s) > 0",
                (schema,),
            ).fetchall()
        return len(rows)

    def deadline_watch(self) -> None:
        if not self.stop.wait(self.args.deadline):
            self.figures.deadline_hit = True
            self.queue.stop()


# -- set-up, audit, report --------------------------------------------------------------------------------


@contextmanager
def fresh_schema(base: str) -> Iterator[str]:
    import psycopg
    from psycopg import sql

    from safe_effects import open_store

    schema = f"se_soak_{uuid.uuid4().hex[:10]}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    store = open_store(url)
    store.migrate()
    store.close()
    try:
        yield url
    finally:
        for _ in range(20):  # PostgreSQL may still be coming back from the restart
            try:
                with psycopg.connect(base, autocommit=True, connect_timeout=3) as conn:
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
                break
            except psycopg.Error:
                time.sleep(0.5)


def reconcile_and_audit(store_url: str, fake: Any, keys: list[str], seen: dict[str, str]) -> dict[str, Any]:
    """Reconcile what is unsettled (lookups only), then count both sides."""
    from safe_effects import EffectStatus, Ledger
    from stripe_safe import METADATA_INTENT, StripeClient

    with Ledger.open(store_url) as ledger:
        client = StripeClient(API_KEY, ledger=ledger, base_addresses={"api": fake.url})
        before = collections.Counter(r.status.value for k in keys if (r := ledger.store.get("default", k)))
        reconciled: collections.Counter[str] = collections.Counter()
        for key in keys:
            record = ledger.store.get("default", key)
            if record is not None and record.status in (EffectStatus.UNKNOWN, EffectStatus.IN_FLIGHT):
                reconciled[ledger.reconcile(client.adapter, intent_key=key).status.value] += 1
        records = {k: ledger.store.get("default", k) for k in keys}
    by_intent: dict[str, list[str]] = collections.defaultdict(list)
    for pi in fake.payment_intents:
        by_intent[pi["metadata"].get(METADATA_INTENT, "?")].append(pi["id"])
    no_record = [k for k, r in records.items() if r is None]
    confirmed = {k: r for k, r in records.items() if r is not None and r.status is EffectStatus.CONFIRMED}
    without_effect = [k for k, r in confirmed.items() if r.provider_result_id not in by_intent.get(k, [])]
    caller_mismatch = [k for k, pid in seen.items() if pid not in by_intent.get(k, [])]
    after = collections.Counter(r.status.value for r in records.values() if r is not None)
    return {
        "provider_effects": fake.effect_count("payment_intents.create"),
        "payment_intents": len(fake.payment_intents),
        "intents_with_an_effect": len(by_intent),
        "duplicates": sum(len(ids) - 1 for ids in by_intent.values()),
        "foreign_effects": len(set(by_intent) - set(keys)),
        "lost_no_record": len(no_record),
        "lost_confirmed_without_effect": len(without_effect),
        "caller_saw_an_id_the_provider_lacks": len(caller_mismatch),
        "ledger_before_reconcile": dict(before),
        "reconcile_pass": dict(reconciled),
        "ledger_after_reconcile": dict(after),
        "unknowns_left": after.get("unknown", 0),
        "unsettled_left": sum(n for s, n in after.items() if s != "confirmed"),
        "effects_without_confirmed_record": len([k for k in by_intent if k in records and k not in confirmed]),
        "confirmed_by": dict(
            collections.Counter(r.resolution.method if r.resolution else "?" for r in confirmed.values())
        ),
    }


def markdown(args: argparse.Namespace, figures: Figures, audit: dict[str, Any]) -> str:
    lost = audit["lost_no_record"] + audit["lost_confirmed_without_effect"]
    kills = sum(n for why, n in figures.kills.items() if why != "worker crash point")
    restart = figures.pg_restart
    pg_line = (
        f"outage once when {restart['at_done']} intents were done: {restart['what']} "
        f"({restart['seconds']} s, exit {restart['exit']})"
        if restart
        else "no outage (`--pg-outage none`)"
    )
    errors = {k: v for k, v in figures.outcomes.items() if k.startswith("error:")}
    command = (
        f".venv/bin/python bench/chaos_soak.py --intents {args.intents} --workers {args.workers} "
        f"--seed {args.seed} --pg-outage {args.pg_outage} --doc docs/failure-matrix.md"
    )
    rows = [
        ("intents", f"{figures.intents}"),
        ("provider effects (PaymentIntents created)", f"{audit['provider_effects']}"),
        ("**duplicates** (two PaymentIntents for one intent)", f"**{audit['duplicates']}**"),
        (
            "**lost intents** (no ledger record / confirmed without its PaymentIntent)",
            f"**{lost}** ({audit['lost_no_record']} / {audit['lost_confirmed_without_effect']})",
        ),
        ("callers told `confirmed` with an id Stripe does not have", f"{audit['caller_saw_an_id_the_provider_lacks']}"),
        ("unknowns left after the reconcile pass", f"{audit['unknowns_left']}"),
        (
            "ledger before / after the reconcile pass",
            f"{audit['ledger_before_reconcile']} / {audit['ledger_after_reconcile']}",
        ),
        ("reconcile pass settled", f"{audit['reconcile_pass'] or 'nothing to do'}"),
        ("confirmed records by resolution", f"{dict(sorted(audit['confirmed_by'].items()))}"),
        ("worker deaths (worker processes started - seats)", f"{figures.worker_starts - args.workers}"),
        ("SIGKILLs sent by the parent (timer, FakeStripe hooks; a dying worker can be hit twice)", f"{kills}"),
        ("SIGKILLs by kind", f"{dict(sorted(figures.kills.items()))}"),
        ("worker processes started", f"{figures.worker_starts}"),
        ("PostgreSQL", pg_line),
        ("calls answered", f"{figures.calls}"),
        ("answers by outcome", f"{dict(sorted(figures.outcomes.items()))}"),
        ("errors surfaced to callers (PostgreSQL away)", f"{sum(errors.values())}"),
        ("workers' pool messages (stderr)", f"{dict(sorted(figures.worker_log.items())) or 'none'}"),
        ("intents out of attempts before the reconcile pass", f"{figures.attempts_exhausted}"),
        ("wall time", f"{figures.elapsed:.0f} s{' (deadline hit)' if figures.deadline_hit else ''}"),
    ]
    lines = [
        f"Last run: `{command}` — {args.workers} worker processes, leases {args.lease_seconds:g} s, "
        f"a timer kill every ~{args.kill_every:g} s, hook kills at {args.hook_kill_rate:.0%} per request and "
        f"point, worker crash points at {args.crash_rate:.1%} each, up to {args.max_attempts} calls per intent.",
        "",
        "| figure | value |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in rows],
        "",
        "Every intent went back to the queue until a caller saw `confirmed` (the way a job queue retries):",
        f"killed workers were restarted and their intents taken over once the {args.lease_seconds:g} s lease ran",
        "out (in_flight → unknown → same-key replay inside Stripe's 24 h window, counted as `key_replay` above).",
        outage_note(figures, errors),
        "Duplicates are counted from FakeStripe's own objects (PaymentIntents grouped by the intent the wrapper",
        "stamped in their metadata), not from the ledger.",
    ]
    return "\n".join(lines)


def outage_note(figures: Figures, errors: dict[str, int]) -> str:
    """What the PostgreSQL outage did to callers, in this run's figures."""
    if not figures.pg_restart:
        return "No PostgreSQL outage in this run."
    if errors:
        return (
            f"During the PostgreSQL outage {sum(errors.values())} calls failed visibly ({', '.join(sorted(errors))}) "
            "and went back to the queue; no worker loop died of it."
        )
    return (
        "No call failed during the PostgreSQL outage: each worker's connection pool kept reconnecting (the "
        "'error connecting' lines above) and its 30 s wait for a connection outlasted the restart, so calls "
        "stalled and then went on; a call whose lease ran out meanwhile would have been taken over like a "
        "killed worker's. A mid-query cut (`--pg-outage terminate`) fails the calls in flight visibly instead "
        "(`error:AdminShutdown` answers), and the queue retries them."
    )


def write_doc(doc: Path, section: str) -> None:
    text = doc.read_text() if doc.exists() else f"# The failure matrix\n\n## Chaos soak\n\n{SOAK_BEGIN}\n{SOAK_END}\n"
    if SOAK_BEGIN not in text:
        text += f"\n## Chaos soak\n\n{SOAK_BEGIN}\n{SOAK_END}\n"
    head, rest = text.split(SOAK_BEGIN, 1)
    tail = rest.split(SOAK_END, 1)[1]
    doc.write_text(f"{head}{SOAK_BEGIN}\n{section}\n{SOAK_END}{tail}")


def parent_main(args: argparse.Namespace) -> int:
    from stripe_safe.testing import FakeStripe

    run = uuid.uuid4().hex[:6]
    keys = [f"order:soak{run}_{i:05d}:charge:v1" for i in range(args.intents)]
    started = time.monotonic()
    with fresh_schema(args.pg) as store_url, FakeStripe() as fake:
        soak = Soak(args, store_url, fake.url, keys)
        fake.server.on_received(soak.hook("hook:after_dispatch"))
        fake.server.on_committed(soak.hook("hook:after_provider_accept"))
        helpers = [threading.Thread(target=soak.chaos_timer, daemon=True)]
        helpers.append(threading.Thread(target=soak.deadline_watch, daemon=True))
        if args.pg_outage != "none":
            helpers.append(threading.Thread(target=soak.pg_outage, daemon=True))
        seats = [threading.Thread(target=slot.run, name=f"slot-{slot.index}") for slot in soak.slots]
        for thread in [*helpers, *seats]:
            thread.start()
        progress = threading.Thread(target=_progress, args=(soak,), daemon=True)
        progress.start()
        for seat in seats:
            seat.join()
        soak.stop.set()
        for helper in helpers:
            helper.join(timeout=120)
        soak.figures.elapsed = time.monotonic() - started
        audit = reconcile_and_audit(store_url, fake, keys, dict(soak.queue.confirmed))
    soak.log.close()
    figures = soak.figures
    with open(args.log) as log:  # what the workers' connection pools said while PostgreSQL was away
        log.seek(soak.log_start)
        figures.worker_log.update(line.split(":", 1)[0].strip() for line in log if line.strip())
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    print(json.dumps({"args": options, "figures": figures.as_json(), "audit": audit}, indent=2, default=str))
    return report(args, figures, audit)


def report(args: argparse.Namespace, figures: Figures, audit: dict[str, Any]) -> int:
    """Print (and with ``--doc``, write) the figures; non-zero when the target (0 duplicates, 0 lost) is missed."""
    section = markdown(args, figures, audit)
    print(section)
    if args.doc is not None:
        write_doc(args.doc, section)
        print(f"wrote the soak section of {args.doc}")
    bad = audit["duplicates"] or audit["lost_no_record"] or audit["lost_confirmed_without_effect"]
    return 1 if bad or audit["caller_saw_an_id_the_provider_lacks"] else 0


def rerender(args: argparse.Namespace) -> int:
    """Render an earlier run's printed JSON again (its own options win), e.g. after the page's wording changed."""
    text = args.from_json.read_text()
    data, _ = json.JSONDecoder().raw_decode(text[text.index("{") :])
    ran = argparse.Namespace(**{**vars(args), **data["args"], "doc": args.doc})
    return report(ran, Figures.from_json(data["figures"]), data["audit"])


def _progress(soak: Soak) -> None:
    while not soak.stop.wait(10):
        print(
            f"[{time.strftime('%H:%M:%S')}] done {soak.queue.done}/{soak.figures.intents}, "
            f"kills {sum(soak.figures.kills.values())}, starts {soak.figures.worker_starts}",
            file=sys.stderr,
            flush=True,
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--intents", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pg", default=os.environ.get("SAFE_EFFECTS_TEST_PG_URL", DEFAULT_PG))
    parser.add_argument(
        "--pg-outage",
        choices=("restart", "terminate", "none"),
        default="restart",
        help="halfway: restart PostgreSQL (default; it is shared, so never in CI), only cut this soak's "
        "connections (terminate), or nothing",
    )
    parser.add_argument(
        "--no-pg-restart", dest="pg_outage", action="store_const", const="none", help="= --pg-outage none"
    )
    parser.add_argument("--kill-every", type=float, default=0.4, help="mean seconds between timer SIGKILLs")
    parser.add_argument("--hook-kill-rate", type=float, default=0.02)
    parser.add_argument("--crash-rate", type=float, default=0.005)
    parser.add_argument("--lease-seconds", type=float, default=2.0)
    parser.add_argument("--max-attempts", type=int, default=12)
    parser.add_argument("--deadline", type=float, default=270.0, help="stop feeding intents after this many seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--log", type=Path, default=Path("/tmp/chaos_soak_workers.log"), help="workers' stderr")
    parser.add_argument("--doc", type=Path, help="write the figures into this page's chaos-soak section")
    parser.add_argument("--from-json", type=Path, help="re-render the figures an earlier run printed; runs nothing")
    # worker mode (used by the parent)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--fake-url", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.from_json is not None:
        return rerender(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
