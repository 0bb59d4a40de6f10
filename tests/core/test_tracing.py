"""The ledger's OpenTelemetry spans, read through the real SDK: a tracer of its own and an in-memory exporter.

Each test asserts the provider's side and the ledger's too: a span that says "confirmed" over two provider
effects, or over an unknown record, would be a trace that lies.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, StatusCode

from safe_effects import EffectRequest, EffectStatus, EffectUnknown, IntentConflict, Ledger
from safe_effects.testing import FakeFailure, GenericFakeAdapter, GenericFakeProvider

KEY = "invoice:inv_42:collect:v1"
REFUND = "invoice:inv_42:refund:v1"
CHARGE = EffectRequest(operation="charge", params={"amount": 2000, "currency": "eur"})
S = EffectStatus


@dataclass
class ContextAdapter(GenericFakeAdapter):
    """The generic fake adapter, noting the span that is current while it sends: where an instrumented HTTP
    client would open its own span."""

    sent_under: list[SpanContext] = field(default_factory=list)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        self.sent_under.append(trace.get_current_span().get_span_context())
        return super().dispatch(request, provider_key)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def ledger(store_url: str, exporter: InMemorySpanExporter) -> Iterator[Ledger]:
    provider = TracerProvider()  # not the global one: nothing else in the process reports here
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Ledger.open(store_url, tracer=provider.get_tracer("safe_effects")) as opened:
        yield opened
    provider.shutdown()


@pytest.fixture
def fake(tmp_path: Path) -> GenericFakeProvider:
    return GenericFakeProvider(tmp_path / "fake.sqlite3")


@pytest.fixture
def adapter(fake: GenericFakeProvider) -> ContextAdapter:
    return ContextAdapter(fake)


def _spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


def test_a_confirmed_effect_is_one_span_naming_its_intent_and_the_repeat_says_it_came_from_the_ledger(
    ledger: Ledger, adapter: ContextAdapter, fake: GenericFakeProvider, exporter: InMemorySpanExporter
) -> None:
    receipt = ledger.execute(adapter, CHARGE, intent_key=KEY)
    ledger.execute(adapter, CHARGE, intent_key=KEY)

    first, repeat = _spans(exporter)
    assert first.name == repeat.name == "safe_effects.execute"
    assert dict(first.attributes or {}) == {
        "safe_effects.intent_key": KEY,
        "safe_effects.tenant": "default",
        "safe_effects.provider": "fake",
        "safe_effects.operation": "charge",
        "safe_effects.from_ledger": False,
        "safe_effects.status": "confirmed",
        "safe_effects.attempt_count": 1,
        "safe_effects.provider_result_id": receipt.provider_result_id,
        "safe_effects.resolution": "provider_response",
    }
    assert first.status.status_code is StatusCode.UNSET
    assert (repeat.attributes or {})["safe_effects.from_ledger"] is True
    # the provider was called once, inside the first span: an instrumented HTTP client's span is its child
    assert [context.span_id for context in adapter.sent_under] == [first.context.span_id]
    assert len(fake.effects()) == 1
    assert ledger.get(KEY).status is S.CONFIRMED


def test_a_lost_answer_is_an_error_span_with_the_record_it_left_and_its_reconciliation_a_span_of_its_own(
    ledger: Ledger, adapter: ContextAdapter, fake: GenericFakeProvider, exporter: InMemorySpanExporter
) -> None:
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ledger.execute(adapter, CHARGE, intent_key=KEY)
    settled = ledger.reconcile(adapter, intent_key=KEY)

    lost, reconciled = _spans(exporter)
    assert lost.status.status_code is StatusCode.ERROR
    attributes = dict(lost.attributes or {})
    assert attributes["safe_effects.error_code"] == "effect_unknown"
    assert attributes["safe_effects.status"] == "unknown"
    assert "safe_effects.provider_result_id" not in attributes  # the answer, and its id, were lost
    [raised] = [event.attributes for event in lost.events if event.name == "exception"]
    assert str(raised["exception.type"]).endswith(".EffectUnknown")

    assert reconciled.name == "safe_effects.reconcile"
    assert reconciled.status.status_code is StatusCode.UNSET
    assert dict(reconciled.attributes or {}) == {
        "safe_effects.intent_key": KEY,
        "safe_effects.tenant": "default",
        "safe_effects.provider": "fake",
        "safe_effects.status": "confirmed",
        "safe_effects.attempt_count": 1,
        "safe_effects.provider_result_id": fake.effects()[0].result_id,
        "safe_effects.resolution": "lookup:search",
    }
    assert settled.status is S.CONFIRMED
    assert len(fake.effects()) == 1  # settled by a lookup: nothing was sent again
    assert len(adapter.sent_under) == 1


def test_a_refused_call_is_an_error_span_naming_the_refusal(
    ledger: Ledger, adapter: ContextAdapter, fake: GenericFakeProvider, exporter: InMemorySpanExporter
) -> None:
    ledger.execute(adapter, CHARGE, intent_key=KEY)
    other = EffectRequest(operation="charge", params={"amount": 9900, "currency": "eur"})
    with pytest.raises(IntentConflict):
        ledger.execute(adapter, other, intent_key=KEY)

    refused = _spans(exporter)[1]
    assert refused.status.status_code is StatusCode.ERROR
    assert (refused.attributes or {})["safe_effects.error_code"] == "intent_conflict"
    assert len(fake.effects()) == 1
    assert ledger.get(KEY).status is S.CONFIRMED


def test_a_compensation_is_a_span_over_the_execute_that_sends_it(
    ledger: Ledger, adapter: ContextAdapter, fake: GenericFakeProvider, exporter: InMemorySpanExporter
) -> None:
    ledger.execute(adapter, CHARGE, intent_key=KEY)
    refund = EffectRequest(operation="refund", params={"charge": KEY, "amount": 2000})
    ledger.compensate(adapter, refund, original_key=KEY, compensating_key=REFUND)

    _, inner, outer = _spans(exporter)  # a span is exported as it ends: the inner one first
    assert outer.name == "safe_effects.compensate"
    assert inner.name == "safe_effects.execute"
    assert inner.parent is not None
    assert inner.parent.span_id == outer.context.span_id
    attributes = dict(outer.attributes or {})
    assert attributes["safe_effects.intent_key"] == REFUND
    assert attributes["safe_effects.compensates"] == KEY
    assert attributes["safe_effects.operation"] == "refund"
    assert attributes["safe_effects.status"] == "confirmed"
    assert len(fake.effects()) == 2  # the charge and its refund
    assert ledger.get(KEY).status is S.COMPENSATED
