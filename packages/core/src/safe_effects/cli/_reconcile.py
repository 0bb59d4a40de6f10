"""``reconcile``: one sweep (or a loop) settling unknowns by provider lookup; never redispatches."""

from __future__ import annotations

import hashlib
import os
import socket
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict
from typing import Annotated

import typer

from safe_effects._adapter_registry import load_adapters
from safe_effects._errors import InvalidInput, MissingDependency
from safe_effects._metrics import PrometheusObserver, serve
from safe_effects._reconciler import MAX_CURSOR_PREFIX, ReconcileItem, Reconciler, ReconcileReport

from ._common import (
    DEBUG_ENV,
    MAX_LIMIT,
    MAX_PORT,
    AdaptersSpec,
    AsJson,
    StoreUrl,
    emit,
    error_line,
    fail,
    opened,
    print_json,
    say,
    table,
)

_SPELLED_OUT = MAX_CURSOR_PREFIX - len("reconcile:")  # providers' names listed in a default cursor name, at most


def _show(
    report: ReconcileReport, as_json: bool, *, one_line: bool = False, listed: tuple[ReconcileItem, ...] | None = None
) -> None:
    """The report as JSON, or as a title that counts every item and a table of the ``listed`` ones (all of
    them unless given)."""
    if as_json:
        print_json({"counts": report.counts(), "items": [asdict(item) for item in report.items]}, one_line=one_line)
        return
    rows = report.items if listed is None else listed
    title = "reconciled: " + (", ".join(f"{k}={v}" for k, v in sorted(report.counts().items())) or "nothing to do")
    if unlisted := len(report.items) - len(rows):
        title += f" ({unlisted} as the last sweep left {'it' if unlisted == 1 else 'them'}, not listed again)"
    if not rows:  # a --loop with nothing new prints one line a sweep, not an empty table
        emit(title)
        return
    columns = ["tenant", "intent key", "provider", "was", "outcome", "method", "note"]
    cells = [[i.tenant, i.intent_key, i.provider, i.before, i.outcome, i.method, i.note] for i in rows]
    emit(table(title, columns, cells))


class _LoopOutput:
    """A loop's sweeps as text: a row only for a record whose outcome differs from the last sweep's, the rest
    counted. A reconciler left running for days would otherwise print every inconclusive record again each
    interval, and its log would bury the one row that changed."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str, str], ReconcileItem] = {}

    def show(self, report: ReconcileReport) -> None:
        last, self._last = self._last, {(i.tenant, i.provider, i.intent_key): i for i in report.items}
        changed = tuple(i for i in report.items if last.get((i.tenant, i.provider, i.intent_key)) != i)
        _show(report, as_json=False, listed=changed)


def reconcile(
    *,
    store: StoreUrl,
    adapters: AdaptersSpec = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_LIMIT, help="Records per provider per sweep.")] = 100,
    loop: Annotated[
        bool,
        typer.Option(
            "--loop",
            help="Sweep every --interval seconds until interrupted; a record is listed again only when its outcome "
            "changed; with --json, one line of JSON a sweep, every record.",
        ),
    ] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.1)] = 30.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", min=0, max=MAX_PORT, help="Serve this process's reconciler counters (with --loop)."
        ),
    ] = None,
    cursor: Annotated[
        str | None,
        typer.Option(
            "--cursor",
            help="Continue from where the last sweep under this name stopped, kept in the ledger, so runs "
            "started by cron go round robin (default: one name per set of providers); '' starts from the "
            "oldest every run.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Look unknown and abandoned in-flight intents up at their provider; inconclusive ones stay unknown."""
    observer = None
    if metrics_port is not None:
        observer = PrometheusObserver()
        serve(observer.registry, port=metrics_port)
    with opened(store, worker_id=f"reconciler:{socket.gethostname()}:{os.getpid()}") as ledger:
        if observer is not None:
            ledger.observer = observer
        loaded = load_adapters(adapters)
        named = _default_cursor(loaded) if cursor is None else cursor or None
        reconciler = Reconciler(ledger, loaded, cursor_name=named)
        if not loop:
            report = reconciler.run_once(limit=limit)
            _show(report, as_json)
            if skipped := sorted({i.provider for i in report.items if i.outcome == "skipped"}):
                # not an error (one reconciler per provider set skips the others'), but never silent
                say(
                    f"skipped records of {', '.join(skipped)}: no adapter here; install the provider's package "
                    "or pass --adapters module:callable"
                )
            if failed := report.counts().get("error", 0):  # a cron job or a script must see it, not only a reader
                fail(f"error: {failed} record(s) could not be reconciled; their notes say the state each is in")
            return
        output = None if as_json else _LoopOutput()  # JSON lines stay whole: a pipeline reads each sweep alone
        while True:
            _sweep(reconciler, limit, output)
            time.sleep(interval)


def _default_cursor(adapters: Mapping[str, object]) -> str:
    """One cursor per set of providers: a reconciler that skips another's records (no adapter for them)
    must not move that one's position past records only the other can look up. A set too long to spell out
    within the cursor name's limit is named by its hash."""
    providers = ",".join(sorted(adapters))
    if len(providers) > _SPELLED_OUT:
        providers = hashlib.sha256(providers.encode()).hexdigest()[:16]
    return f"reconcile:{providers}"


def _sweep(reconciler: Reconciler, limit: int, output: _LoopOutput | None) -> None:
    """One sweep of the loop: a store that fails it (a restart, a failover) is reported and the next sweep
    tries again, as the reconciler must keep running; a refusal that no retry can heal still ends the loop."""
    try:
        report = reconciler.run_once(limit=limit)
    except (InvalidInput, MissingDependency):
        raise
    except Exception as error:
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        say(error_line(error))
        return
    if output is None:
        _show(report, as_json=True, one_line=True)  # a long-running process's output goes to a log: a line a sweep
    else:
        output.show(report)
