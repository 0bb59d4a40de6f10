"""The typer application: one module per command group, errors turned into messages by ``handled``."""

from __future__ import annotations

import typer

from ._check import check
from ._common import handled
from ._compensate import compensate
from ._inspect import list_effects, lookup, show
from ._metrics import metrics
from ._migrate import migrate
from ._purge import purge
from ._reconcile import reconcile
from ._resolve import approve, decline, pending, resolve

app = typer.Typer(
    help="Operate a safe-effects ledger: find unknown effects, look them up, settle them with evidence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("list")(handled(list_effects))
app.command("show")(handled(show))
app.command("lookup")(handled(lookup))
app.command("reconcile")(handled(reconcile))
app.command("resolve")(handled(resolve))
app.command("approve")(handled(approve))
app.command("decline")(handled(decline))
app.command("pending")(handled(pending))
app.command("compensate")(handled(compensate))
app.command("purge")(handled(purge))
app.command("metrics")(handled(metrics))
app.command("migrate")(handled(migrate))
app.command("check")(handled(check))
