"""A wrapped Stripe call on a trace: the SDK's HTTP request, traced by OpenTelemetry's own requests
instrumentation (as a service that runs it has it), is a child of the intent's span. So the trace of a lost
answer shows which POST it lost, and the retry's replay of it under the same intent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from safe_effects import EffectStatus, EffectUnknown, Ledger
from safe_effects.testing import FakeClock, Fault
from stripe_safe import StripeClient
from stripe_safe.testing import FakeStripe

from .conftest import API_KEY, FAST_RETRY, KEY, PI, SHORT_TIMEOUT


@pytest.fixture
def traced_client(
    fake: FakeStripe, clock: FakeClock, store_url: str
) -> Iterator[tuple[StripeClient, Ledger, InMemorySpanExporter]]:
    """A wrapped client whose ledger traces, with the requests library instrumented into the same tracer."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = RequestsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    ledger = Ledger.open(store_url, clock=clock, retry=FAST_RETRY, tracer=provider.get_tracer("safe_effects"))
    try:
        yield (
            StripeClient(API_KEY, ledger=ledger, base_addresses={"api": fake.url}, timeout=SHORT_TIMEOUT),
            ledger,
            exporter,
        )
    finally:
        ledger.close()
        instrumentor.uninstrument()
        provider.shutdown()


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_the_sdks_request_is_a_child_of_the_intents_span_on_time_and_when_its_answer_is_lost(
    traced_client: tuple[StripeClient, Ledger, InMemorySpanExporter], fake: FakeStripe
) -> None:
    client, ledger, exporter = traced_client
    fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    intent = client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    spans = list(exporter.get_finished_spans())
    lost, replayed = [s for s in spans if s.name == "safe_effects.execute"]
    [lost_post] = _children(spans, lost)
    [replayed_post] = _children(spans, replayed)
    assert lost_post.name == replayed_post.name == "POST"
    assert lost_post.status.status_code is StatusCode.ERROR  # the connection dropped: no answer
    answered = dict(replayed_post.attributes or {})  # the attribute's name depends on the semconv opt-in
    assert answered.get("http.response.status_code", answered.get("http.status_code")) == 200
    assert lost.status.status_code is StatusCode.ERROR
    assert (lost.attributes or {})["safe_effects.error_code"] == "effect_unknown"
    assert (lost.attributes or {})["safe_effects.intent_key"] == KEY
    attributes = dict(replayed.attributes or {})
    assert attributes["safe_effects.provider"] == "stripe"
    assert attributes["safe_effects.status"] == "confirmed"
    assert attributes["safe_effects.resolution"] == "key_replay"
    assert attributes["safe_effects.provider_result_id"] == intent.id

    assert fake.effect_count("payment_intents.create") == 1  # two POSTs, one key: Stripe charged once
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED
