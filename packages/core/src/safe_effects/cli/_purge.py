"""``purge``: delete settled records past the retention floor; unknown, in-flight and prepared ones never."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from safe_effects._adapter_registry import load_adapters
from safe_effects._purge import DEFAULT_BATCH, purge_settled

from ._common import MAX_DAYS, AsJson, StoreUrl, emit, opened, print_json


def purge(
    *,
    store: StoreUrl,
    older_than: Annotated[
        int, typer.Option("--older-than", min=0, max=MAX_DAYS, help="Days since a record last changed.")
    ],
    force_min_days: Annotated[
        int | None,
        typer.Option(
            "--force-min-days",
            min=0,
            max=MAX_DAYS,
            help="Lower the retention floor explicitly (default: 120 days, or the contracts of --adapters).",
        ),
    ] = None,
    adapters: Annotated[
        str | None,
        typer.Option("--adapters", help="module:callable; their contracts' retention minimums raise the floor."),
    ] = None,
    batch: Annotated[
        int,
        typer.Option("--batch", min=1, max=10_000, help="Records per delete; SQLite's writers wait for each one."),
    ] = DEFAULT_BATCH,
    as_json: AsJson = False,
) -> None:
    """Delete confirmed, rejected and compensated records older than --older-than days (audit rows stay)."""
    with opened(store) as ledger:
        report = purge_settled(
            ledger.store,
            older_than=timedelta(days=older_than),
            now=ledger.clock(),
            adapters=load_adapters(adapters) if adapters else None,
            force_minimum=None if force_min_days is None else timedelta(days=force_min_days),
            batch=batch,
        )
    if as_json:
        print_json({"deleted": report.deleted, "cutoff": report.cutoff, "minimum_days": report.minimum.days})
        return
    emit(
        f"deleted {report.deleted} settled record(s) last updated before {report.cutoff:%Y-%m-%d %H:%M} UTC "
        f"(retention floor {report.minimum.days} days)"
    )
