"""The ``safe-effects`` operator CLI: the runbook (docs/operations.md) without SQL. Needs ``safe-effects[cli]``."""

from __future__ import annotations

import logging
import sys


def main() -> None:
    """Entry point of the ``safe-effects`` script; typer and rich are imported only here."""
    try:
        from ._app import app  # noqa: PLC0415  # optional extra: typer and rich
    except ImportError as error:
        sys.stderr.write(
            f"safe-effects CLI needs its extra ({error.name} is missing): pip install 'safe-effects[cli]'\n"
        )
        raise SystemExit(1) from None
    # the pool logs every reconnect attempt while PostgreSQL is down; the commands report the outage themselves
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    app(prog_name="safe-effects")


__all__ = ["main"]
