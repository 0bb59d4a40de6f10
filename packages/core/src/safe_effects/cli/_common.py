"""What every command shares: the store option, JSON and table output, and error reporting without tracebacks."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from safe_effects._adapter import ProviderAdapter
from safe_effects._adapter_registry import ENTRY_POINT_GROUP, load_adapters
from safe_effects._approvals import Approval
from safe_effects._errors import InvalidInput, MigrationsPending, SafeEffectsError
from safe_effects._ledger import Ledger
from safe_effects._passwords import redacted
from safe_effects._postgres import PostgresStore
from safe_effects._store_url import SQLITE_PREFIX, open_store

DEBUG_ENV = "SAFE_EFFECTS_DEBUG"
# bounds for numeric options, so an absurd value is a usage error, not an OverflowError from SQLite or datetime
MAX_LIMIT = 1_000_000  # records per listing or sweep
MAX_DAYS = 36_500  # a century of retention
MAX_PORT = 65_535
P = ParamSpec("P")

StoreUrl = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="SAFE_EFFECTS_STORE",
        show_envvar=True,
        help="Ledger store URL: sqlite:///path.db or postgresql://...",
    ),
]
Tenant = Annotated[str, typer.Option("--tenant", help="Tenant of the intent.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
AdaptersSpec = Annotated[
    str | None,
    typer.Option(
        "--adapters",
        help=f"module:callable returning {{provider: adapter}}; default: the {ENTRY_POINT_GROUP!r} entry points.",
    ),
]
OperatorName = Annotated[str, typer.Option("--operator", help="Who you are; recorded in the audit trail.")]
# what an operator types is kept for good (the audit trail is append-only and purge leaves it): say so where
# it is typed, not only in the docs
NO_PERSONAL_DATA = (
    "Kept in the append-only audit trail, which purge never removes: write ids and ticket numbers, never "
    "personal data (a customer's name, email address, phone number)."
)
ReasonText = Annotated[str, typer.Option("--reason", help=f"Why. {NO_PERSONAL_DATA}")]


def handled(command: Callable[P, None]) -> Callable[P, None]:
    """Turn library refusals into one line on stderr and exit status 1, never a traceback."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except typer.Exit:
            raise
        except Exception as error:  # a store outage or an adapter bug: say what, offer the traceback on demand
            if os.environ.get(DEBUG_ENV) and not isinstance(error, SafeEffectsError):
                raise
            fail(error_line(error))

    return run


def error_line(error: Exception) -> str:
    """``error [code]: message`` for the library's typed errors, the exception's class for any other."""
    if isinstance(error, SafeEffectsError):
        return f"error [{error.code}]: {error}"
    return f"error: {type(error).__name__}: {error} (set {DEBUG_ENV}=1 for the traceback)"


_PIPED_WIDTH = 200  # columns for output that is not a terminal, unless COLUMNS says otherwise


def emit(renderable: Any) -> None:
    """Print to the current stdout (a fresh console honours COLUMNS). Markup and emoji codes off: reasons are
    free text, and an intent key like ``user:ok:verify:v1`` must print as itself, not as ``user🆗verify:v1``."""
    # piped or redirected (a file, grep, a log): rich would wrap at 80 columns and split values mid-word
    wide = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else _PIPED_WIDTH
    Console(markup=False, highlight=False, emoji=False, width=wide).print(renderable)


def fail(message: str) -> NoReturn:
    say(message)
    raise typer.Exit(1)


def say(message: str) -> None:
    """One line on stderr: libpq's messages span lines, and a log line must stay one record."""
    sys.stderr.write(" ".join(message.split()) + "\n")


@contextmanager
def opened(store: str, *, worker_id: str | None = None) -> Iterator[Ledger]:
    """The existing, migrated ledger on ``store``, closed after the command.

    A command never creates or upgrades a store: a mistyped path or schema must not answer "no unknowns" from
    a new empty ledger, and a migration is a step an operator plans (``safe-effects migrate``).
    """
    if store.startswith(SQLITE_PREFIX) and not (path := Path(store[len(SQLITE_PREFIX) :])).exists():
        # sqlite:///x.db is x.db in the current directory; an absolute path takes four slashes
        where = "" if path.is_absolute() else f" (that is {path.absolute()}; an absolute path is sqlite:////...)"
        raise InvalidInput(
            f"no ledger at {store}{where}: the file does not exist (create one with `safe-effects migrate`)"
        )
    backend = open_store(store)
    try:
        if isinstance(backend, PostgresStore) and not backend.schema_exists():
            raise InvalidInput(
                f"no ledger at {redacted(store)}: the database has no schema {backend.schema!r} (check the URL's "
                "?schema=, which defaults to safe_effects)"
            )
        ledger = Ledger(backend, worker_id=worker_id)
    except MigrationsPending as pending:  # the same refusal, naming the URL (SAFE_EFFECTS_STORE may have chosen it)
        backend.close()
        raise MigrationsPending(pending.versions, where=f"the ledger at {redacted(store)}") from None
    except BaseException:
        backend.close()
        raise
    with ledger:
        yield ledger


def adapter_for(spec: str | None, provider: str) -> ProviderAdapter[Any]:
    adapter = load_adapters(spec).get(provider)
    if adapter is None:
        raise InvalidInput(
            f"no adapter for provider {provider!r}: install its package (entry point group "
            f"{ENTRY_POINT_GROUP!r}) or pass --adapters module:callable"
        )
    return adapter


def jsonable(value: Any) -> Any:
    """Models, dataclasses' dicts and datetimes as plain JSON values."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def print_json(value: Any, *, one_line: bool = False) -> None:
    """Indented for a reader; ``one_line`` (JSON Lines) for a log pipeline that reads one record per line."""
    if one_line:
        typer.echo(json.dumps(jsonable(value), sort_keys=True, separators=(",", ":")))
    else:
        typer.echo(json.dumps(jsonable(value), indent=2, sort_keys=True))


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> Table:
    shown = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:  # keys and ids stay on one line so they can be copied into the next command
        whole = column in ("intent key", "provider id", "field")
        shown.add_column(column, no_wrap=whole, min_width=len(column), overflow="fold")
    for row in rows:
        shown.add_row(*("" if cell is None else str(cell) for cell in row))
    return shown


def age(since: datetime | None, now: datetime) -> str:
    """``3d04h``, ``2h05m``, ``4m12s``, ``9s``: how long ago, compact enough for a table column."""
    if since is None:
        return ""
    seconds = max(0, int((now - since).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def summary_text(summary: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(summary.items()))


def asked_for(approval: Approval) -> str:
    """What a resolution request asks, in one cell: the state, and the provider id and evidence that come with
    it, which the approver approves along with the state."""
    lines = [str(approval.to_status)]
    if approval.provider_result_id:
        lines.append(f"provider id: {approval.provider_result_id}")
    if approval.evidence:
        lines.append(f"evidence: {approval.evidence}")
    return "\n".join(lines)
