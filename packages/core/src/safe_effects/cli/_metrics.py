"""``metrics``: serve the store's gauges to Prometheus (or print them once)."""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any

import typer

from safe_effects._errors import LedgerUnavailable
from safe_effects._metrics import StoreCollector, StoreNotOpened, prometheus, serve, store_registry

from ._common import MAX_PORT, StoreUrl, error_line, opened, say

REOPEN_SECONDS = 5.0  # between attempts to open a store that was down when the exporter started


def metrics(
    *,
    store: StoreUrl,
    port: Annotated[int, typer.Option("--port", min=0, max=MAX_PORT, help="Port to serve /metrics on.")] = 9464,
    addr: Annotated[str, typer.Option("--addr", help="Address to bind.")] = "0.0.0.0",
    once: Annotated[bool, typer.Option("--print", help="Print the exposition once and exit.")] = False,
) -> None:
    """Effects by status and provider, and the oldest unknown's age, read from the store at each scrape."""
    if once:
        with opened(store) as ledger:
            typer.echo(
                prometheus().generate_latest(store_registry(ledger.store, clock=ledger.clock)).decode(), nl=False
            )
        return
    registry = prometheus().CollectorRegistry(auto_describe=True)
    not_opened = StoreNotOpened()
    registry.register(not_opened)
    serving = False
    while True:
        try:
            with opened(store) as ledger:  # a wrong URL or schema, or a migration pending, still ends the command
                registry.unregister(not_opened)
                registry.register(StoreCollector(ledger.store, clock=ledger.clock))
                serving = serving or _serve(registry, port, addr)
                threading.Event().wait()
        except LedgerUnavailable as down:  # started during an outage: serve store_up 0 until it answers
            serving = serving or _serve(registry, port, addr)
            say(f"{error_line(down)}; serving safe_effects_store_up 0, opening it again in {REOPEN_SECONDS:g} s")
            time.sleep(REOPEN_SECONDS)


def _serve(registry: Any, port: int, addr: str) -> bool:
    serve(registry, port=port, addr=addr)
    typer.echo(f"serving http://{addr}:{port}/metrics (Ctrl-C stops)", err=True)
    return True
