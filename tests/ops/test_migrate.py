"""A command never creates or upgrades a ledger; ``safe-effects migrate`` does, once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from safe_effects import open_store
from safe_effects.cli._app import app


def run(url: str, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"SAFE_EFFECTS_STORE": url})


def test_a_mistyped_sqlite_path_is_refused_and_no_file_appears(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    listed = run(url, "list", "--json")
    assert listed.exit_code == 1
    assert "the file does not exist (create one with `safe-effects migrate`)" in listed.stderr
    assert not (tmp_path / "typo.db").exists()


def test_an_unmigrated_store_is_refused_until_migrate_runs_once(fresh_store_url: Callable[[], str]) -> None:
    url = fresh_store_url()
    store = open_store(url)
    try:
        pending = store.pending_migrations()
        if url.startswith("sqlite"):  # an existing file without tables: the same refusal as a stale schema
            assert pending == [1, 2, 3]
    finally:
        store.close()
    refused = run(url, "list")
    assert refused.exit_code == 1
    assert "lacks schema migration(s) 1, 2, 3: run `safe-effects migrate` first" in refused.stderr

    first = run(url, "migrate", "--json")
    again = run(url, "migrate")
    listed = run(url, "list", "--json")

    assert json.loads(first.stdout)["applied"] == [1, 2, 3]
    assert "the schema is up to date" in again.stdout
    assert (listed.exit_code, json.loads(listed.stdout)) == (0, [])
