"""``check``: a deploy's preflight. The ledger store, and every installed provider's settings, asked read-only."""

from __future__ import annotations

import os
from dataclasses import asdict

import typer

from safe_effects._adapter_registry import load_adapters
from safe_effects._deploy_check import DeployCheck, deploy_check_of
from safe_effects._errors import SafeEffectsError
from safe_effects._passwords import redacted
from safe_effects._postgres import PostgresStore

from ._common import AdaptersSpec, AsJson, StoreUrl, emit, error_line, opened, print_json


def check(*, store: StoreUrl, adapters: AdaptersSpec = None, as_json: AsJson = False) -> None:
    """Check a deploy before its workers send: the ledger answers with this release's schema, and each
    installed provider's adapter builds from the environment and finds its provider's settings complete (what
    settles a lost answer there). Reads only; exit status 1 when anything is a problem."""
    reports = [_store_check(store), *_provider_checks(adapters)]
    if as_json:
        print_json([{**asdict(report), "ok": report.ok} for report in reports])
    else:
        for report in reports:
            emit(_text(report))
    if not all(report.ok for report in reports):
        raise typer.Exit(1)


def _store_check(store: str) -> DeployCheck:
    where = redacted(store)  # a password never reaches a log
    try:
        with opened(store) as ledger:
            checked = [f"the ledger at {where} answers, with this release's schema"]
            if isinstance(ledger.store, PostgresStore):
                checked.append("this host's clock agrees with the database server's")
    except SafeEffectsError as refused:  # no ledger there, migrations pending, unreachable, clock skewed
        return DeployCheck("store", problems=(error_line(refused),))
    return DeployCheck("store", checked=tuple(checked))


def _provider_checks(spec: str | None) -> list[DeployCheck]:
    registered = load_adapters(spec)
    reports = []
    for provider in sorted(registered):
        try:
            adapter = registered[provider]
        except SafeEffectsError as unbuilt:  # a factory's missing setting, as the reconciler would meet it
            reports.append(DeployCheck(provider, problems=(str(unbuilt),)))
            continue
        reports.append(deploy_check_of(adapter, provider, os.environ))
    return reports


def _text(report: DeployCheck) -> str:
    verdict = "ok" if report.ok else "PROBLEM"
    if report.ok and report.unchecked:
        verdict = "ok as far as checked"
    lines = [f"{report.subject}: {verdict}"]
    lines += [f"  problem: {line}" for line in report.problems]
    lines += [f"  checked: {line}" for line in report.checked]
    lines += [f"  not checked: {line}" for line in report.unchecked]
    return "\n".join(lines)
