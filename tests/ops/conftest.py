"""An operator's world: a ledger with some unknown intents, the generic fake behind them, and the CLI."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from safe_effects import EffectRecord, EffectRequest, EffectUnknown, Ledger, RetryPolicy
from safe_effects.cli._app import app
from safe_effects.testing import FakeFailure, GenericFakeAdapter, GenericFakeProvider

HERE = Path(__file__).parent
ADAPTERS = "ops_fake_adapters:adapters"
FAKE_ENV = "SAFE_EFFECTS_OPS_FAKE"


@dataclass
class Ops:
    """The store URL, the ledger and fake behind it, and a CLI runner with SAFE_EFFECTS_STORE set."""

    url: str
    ledger: Ledger
    fake: GenericFakeProvider
    adapter: GenericFakeAdapter
    env: dict[str, str]

    def cli(self, *args: str, env: dict[str, str] | None = None) -> Any:
        return CliRunner().invoke(app, list(args), env={**self.env, **(env or {})})

    def cli_json(self, *args: str) -> Any:
        result = self.cli(*args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def unknown(
        self,
        key: str,
        *,
        happened: bool = True,
        amount: int | None = None,
        currency: str = "usd",
        sent_ago: timedelta = timedelta(0),
    ) -> EffectRecord:
        """An intent whose response was lost: the fake acted (``happened``) or never did; sent ``sent_ago``
        before now (past the fake's normal response window and twice the allowed clock skew, a lookup's
        "absent" or "refused" counts)."""
        self.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT if happened else FakeFailure.LOST_BEFORE_COMMIT)
        summary = {} if amount is None else {"amount": str(amount), "currency": currency}
        params = {"amount": amount or 100, "currency": currency, "key": key}
        request = EffectRequest(operation="charge", params=params, summary=summary)
        sender = self.ledger if not sent_ago else Ledger(self.ledger.store, clock=lambda: datetime.now(UTC) - sent_ago)
        with pytest.raises(EffectUnknown):
            sender.execute(self.adapter, request, intent_key=key)
        return self.ledger.get(key)

    def confirmed(self, key: str) -> EffectRecord:
        request = EffectRequest(operation="charge", params={"amount": 100, "key": key})
        return self.ledger.execute(self.adapter, request, intent_key=key).record

    def trail(self, key: str) -> list[tuple[str | None, str, int, str]]:
        return [(a.from_status, a.to_status, a.version, a.actor) for a in self.ledger.store.audit_trail("default", key)]


@pytest.fixture
def ops(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ops]:
    monkeypatch.syspath_prepend(str(HERE))  # so --adapters can import ops_fake_adapters in this process
    fake_path = str(tmp_path / "fake.db")
    adapter = importlib.import_module("ops_fake_adapters").make_adapter(fake_path)
    ledger = Ledger.open(store_url, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    env = {
        "SAFE_EFFECTS_STORE": store_url,
        FAKE_ENV: fake_path,
        "SAFE_EFFECTS_APPROVAL_THRESHOLDS": "",
        "COLUMNS": "250",
    }
    yield Ops(store_url, ledger, adapter.fake, adapter, env)
    ledger.close()
