"""OpenTelemetry spans around the ledger's calls that reach a provider, when the ledger is given a tracer.

``Ledger(store, tracer=trace.get_tracer("safe_effects"))`` runs each ``execute``, ``compensate`` and
reconciliation inside a span of its own. The provider SDK's HTTP span (from the requests, urllib3 or botocore
instrumentation) then nests under the intent it carried out, so a trace shows which request charged which
invoice, and a lost answer shows as an ``effect_unknown`` span with the request under it. Without a tracer
(the default) a call costs one attribute test more.

Core does not import OpenTelemetry: any object with its ``Tracer.start_as_current_span`` will do.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from ._errors import EffectOutcome, SafeEffectsError
from ._records import EffectRecord

P = ParamSpec("P")
T = TypeVar("T")
PREFIX = "safe_effects."  # every attribute's namespace, as OpenTelemetry's naming rules ask of a library


class Span(Protocol):
    """What the ledger does with an OpenTelemetry span: set attributes (the tracer ends it)."""

    def set_attribute(self, key: str, value: str | bool | int) -> None: ...


class Tracer(Protocol):
    """An OpenTelemetry ``Tracer``: ``trace.get_tracer("safe_effects")``, or one of a given provider."""

    def start_as_current_span(
        self, name: str, *, attributes: Mapping[str, str] | None = None
    ) -> AbstractContextManager[Span]: ...


class _Traced(Protocol):
    tracer: Tracer | None


L = TypeVar("L", bound=_Traced)


def traced(
    name: str, record_of: Callable[[Any], object]
) -> Callable[[Callable[Concatenate[L, P], T]], Callable[Concatenate[L, P], T]]:
    """Run the method in a span ``name`` when its ledger has a tracer. The span gets the call's intent, tenant,
    provider and operation at the start, and at the end the record ``record_of(result)`` returns (its status,
    attempts, provider id, how it was settled) or the typed error's ``code`` and the record it carries.
    OpenTelemetry marks a span whose call raised as an error and records the exception."""

    def decorate(method: Callable[Concatenate[L, P], T]) -> Callable[Concatenate[L, P], T]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def call(self: L, /, *args: P.args, **kwargs: P.kwargs) -> T:
            tracer = self.tracer
            if tracer is None:
                return method(self, *args, **kwargs)
            try:
                arguments = signature.bind(self, *args, **kwargs)
            except TypeError:  # a wrong call: the method's own TypeError says it, with no span
                return method(self, *args, **kwargs)
            arguments.apply_defaults()
            with tracer.start_as_current_span(name, attributes=_call_attributes(arguments.arguments)) as span:
                try:
                    result = method(self, *args, **kwargs)
                except SafeEffectsError as error:
                    span.set_attribute(f"{PREFIX}error_code", error.code)
                    if isinstance(error, EffectOutcome) and error.record is not None:
                        _record_attributes(span, error.record)
                    raise
                if isinstance(from_ledger := getattr(result, "from_ledger", None), bool):
                    span.set_attribute(f"{PREFIX}from_ledger", from_ledger)
                if isinstance(record := record_of(result), EffectRecord):
                    _record_attributes(span, record)
                return result

        return call

    return decorate


def _call_attributes(arguments: Mapping[str, Any]) -> dict[str, str]:
    """The call's intent as span attributes, read without validating anything (the call does that)."""
    found = {
        "intent_key": arguments.get("intent_key", arguments.get("compensating_key")),
        "compensates": arguments.get("original_key"),
        "tenant": arguments.get("tenant"),
        "provider": getattr(arguments.get("adapter"), "provider", None),
        "operation": getattr(arguments.get("request"), "operation", None),
    }
    return {f"{PREFIX}{name}": str(value) for name, value in found.items() if isinstance(value, str)}


def _record_attributes(span: Span, record: EffectRecord) -> None:
    span.set_attribute(f"{PREFIX}status", record.status.value)
    span.set_attribute(f"{PREFIX}attempt_count", record.attempt_count)
    if record.provider_result_id is not None:
        span.set_attribute(f"{PREFIX}provider_result_id", record.provider_result_id)
    if record.resolution is not None:
        span.set_attribute(f"{PREFIX}resolution", record.resolution.method)
