"""The ``--adapters`` target the ops tests pass to the CLI: the generic fake, located through the environment."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from safe_effects import EffectRecord, LookupResult, ProviderAdapter, ProviderContract
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

FAKE_ENV = "SAFE_EFFECTS_OPS_FAKE"
DELAY_ENV = "SAFE_EFFECTS_OPS_LOOKUP_DELAY"


class SlowLookups(GenericFakeAdapter):
    """Lookups that take a moment, so two reconciler processes really overlap."""

    def lookup(self, record: EffectRecord) -> LookupResult:
        time.sleep(float(os.environ.get(DELAY_ENV, "0")))
        return GenericFakeAdapter.lookup(self, record)


class Misconfigured(GenericFakeAdapter):
    """An adapter that cannot work (a missing API key): every record of its provider ends as ``error``."""

    def contract_for(self, operation: str) -> ProviderContract:
        raise RuntimeError("FAKE_API_KEY is not set")


class LookupsRefused(GenericFakeAdapter):
    """Every lookup refused, as with a revoked API key or the provider's API down."""

    def lookup(self, record: EffectRecord) -> LookupResult:
        raise RuntimeError("401: the API key was revoked")


def make_adapter(path: str, *, retention_days: int | None = None) -> GenericFakeAdapter:
    adapter = SlowLookups(GenericFakeProvider(path))
    if retention_days is not None:
        adapter.contract = adapter.contract.model_copy(
            update={"record_retention_minimum": timedelta(days=retention_days)}
        )
    return adapter


def from_env(env: Mapping[str, str]) -> ProviderAdapter[Any]:
    """The shape of a ``safe_effects.adapters`` entry point: build the adapter from environment variables."""
    return make_adapter(env[FAKE_ENV])


def adapters() -> dict[str, ProviderAdapter[Any]]:
    return {"fake": make_adapter(os.environ[FAKE_ENV])}


def lookups_refused() -> dict[str, ProviderAdapter[Any]]:
    return {"fake": LookupsRefused(GenericFakeProvider(os.environ[FAKE_ENV]))}


def long_retention() -> dict[str, ProviderAdapter[Any]]:
    """A provider whose contract keeps records a year: purge must respect it."""
    return {"fake": make_adapter(os.environ[FAKE_ENV], retention_days=365)}


def two_floors() -> dict[str, ProviderAdapter[Any]]:
    """The fake as ``fake`` (the default 120-day floor) and as ``fake2``, whose contract keeps records a year."""
    fake = make_adapter(os.environ[FAKE_ENV])
    long = GenericFakeAdapter(fake.fake, provider="fake2")
    long.contract = long.contract.model_copy(update={"record_retention_minimum": timedelta(days=365)})
    return {"fake": fake, "fake2": long}


def proving_absence() -> dict[str, ProviderAdapter[Any]]:
    """The fake with lookups whose "absent" the contract trusts (a lookup may reopen an intent)."""
    adapter = make_adapter(os.environ[FAKE_ENV])
    adapter.contract = adapter.contract.model_copy(
        update={
            "lookups": tuple(m.model_copy(update={"proves_absence": True}) for m in adapter.contract.lookups),
            "redispatch_when_proven_absent": True,
        }
    )
    return {"fake": adapter}


def misconfigured() -> dict[str, ProviderAdapter[Any]]:
    return {"fake": Misconfigured(GenericFakeProvider(os.environ[FAKE_ENV]))}
