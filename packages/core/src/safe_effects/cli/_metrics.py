"""``metrics``: serve the store's gauges to Prometheus (or print them once)."""

from __future__ import annotations

import threading
from typing import Annotated

import typer

from safe_effects._metrics import prometheus, serve, store_registry

from ._common import MAX_PORT, StoreUrl, opened


def metrics(
    *,
    store: StoreUrl,
    port: Annotated[int, typer.Option("--port", min=0, max=MAX_PORT, help="Port to serve /metrics on.")] = 9464,
    addr: Annotated[str, typer.Option("--addr", help="Address to bind.")] = "0.0.0.0",
    once: Annotated[bool, typer.Option("--print", help="Print the exposition once and exit.")] = False,
) -> None:
    """Effects by status and provider, and the oldest unknown's age, read from the store at each scrape."""
    with opened(store) as ledger:
        registry = store_registry(ledger.store, clock=ledger.clock)
        if once:
            typer.echo(prometheus().generate_latest(registry).decode(), nl=False)
            return
        serve(registry, port=port, addr=addr)
        typer.echo(f"serving http://{addr}:{port}/metrics (Ctrl-C stops)", err=True)
        threading.Event().wait()
