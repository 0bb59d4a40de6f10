"""The library's exceptions keep their type and fields across a process boundary (pickle).

A process pool hands a worker's exception back pickled, and so does a job runner's result backend: before
``SafeEffectsError.__reduce__`` every outcome with keyword-only fields came back as a ``TypeError`` (a process
pool broke as a whole), so a caller could not tell rejected from unknown.
"""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from safe_effects import (
    EffectDeferred,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    IllegalTransition,
    IntentConflict,
    Ledger,
    MigrationsPending,
    MissingDependency,
    SafeEffectsError,
)
from safe_effects.testing import FakeFailure, GenericFakeAdapter, GenericFakeProvider

KEY = "invoice:inv_7:collect:v1"
CHARGE = EffectRequest(operation="charge", params={"amount": 700})


class Unpicklable(Exception):
    """An SDK error whose own pickling fails (a required keyword, as some SDKs' errors have)."""

    def __init__(self, message: str, *, http_status: int) -> None:
        super().__init__(message)
        self.http_status = http_status


@pytest.mark.parametrize(
    "error",
    [
        EffectUnknown("maybe sent", intent_key=KEY),
        EffectRejected("declined", intent_key=KEY, provider_error=Unpicklable("card declined", http_status=402)),
        EffectDeferred("later", intent_key=KEY, retry_after=8.0, provider_error=Unpicklable("slow", http_status=429)),
        IntentConflict(
            tenant="default", intent_key=KEY, recorded_digest="sha256:" + "a" * 64, new_digest="sha256:" + "b" * 64
        ),
        IllegalTransition("confirmed", "in_flight", KEY, why="settled"),
        MigrationsPending([4, 5]),
        MissingDependency("psycopg", "postgres"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_an_exception_comes_back_from_pickle_with_its_type_message_and_fields(error: SafeEffectsError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    expected = {name: None if name == "provider_error" else value for name, value in vars(error).items()}
    assert vars(back) == expected  # a provider's exception that cannot travel stays behind
    if isinstance(error, ImportError):
        assert back.msg == error.msg


def test_a_provider_exception_that_pickles_travels_with_the_outcome() -> None:
    error = EffectRejected("declined", intent_key=KEY, provider_error=ValueError("card declined"))
    back = pickle.loads(pickle.dumps(error))
    assert isinstance(back.provider_error, ValueError)
    assert str(back.provider_error) == "card declined"
    assert copy.copy(error).provider_error is error.provider_error


def _charge_in_a_worker(store_url: str, provider_path: str) -> str:
    """A process pool's job: the provider times out after it acted, so the call raises EffectUnknown."""
    fake = GenericFakeProvider(provider_path)
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with Ledger.open(store_url) as ledger:
        ledger.execute(GenericFakeAdapter(fake), CHARGE, intent_key=KEY)
    return "confirmed"


def test_a_process_pools_worker_raises_effect_unknown_to_its_caller_with_the_record(
    store_url: str, tmp_path: Path
) -> None:
    provider_path = str(tmp_path / "provider.db")
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        future = pool.submit(_charge_in_a_worker, store_url, provider_path)
        with pytest.raises(EffectUnknown) as caught:
            future.result(timeout=60)
        assert pool.submit(str, 1).result(timeout=60) == "1"  # the pool still works: it did not break

    assert caught.value.intent_key == KEY
    assert caught.value.record is not None
    assert caught.value.record.status is EffectStatus.UNKNOWN
    assert len(GenericFakeProvider(provider_path).effects()) == 1  # the provider acted once
    with Ledger.open(store_url) as ledger:
        assert ledger.get(KEY).status is EffectStatus.UNKNOWN


def test_a_ledger_handed_to_another_process_is_refused_by_name(store_url: str) -> None:
    """Passing the ledger (or a client holding one) to a spawned process or a task queue failed deep in pickle,
    naming a thread-local (the misuse review); the refusal says where to open the ledger instead."""
    with Ledger.open(store_url) as ledger:
        with pytest.raises(
            TypeError, match=r"cannot be pickled or copied: it holds open database connections.*worker_process_init"
        ):
            pickle.dumps(ledger)
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps({"job": "charge", "ledger": ledger})
