"""The seam between the executor and a provider: data plus a few small functions per provider."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from ._contract import ProviderContract
from ._errors import InvalidInput
from ._keys import IntentKey
from ._records import EffectRecord
from ._text import storable_text

ResponseT = TypeVar("ResponseT")


class Outcome(StrEnum):
    RETRYABLE = "definitive_retryable"  # no effect; the same request may be sent again with the same key
    FINAL = "definitive_final"  # no effect; sending again will not help
    UNKNOWN = "unknown"  # the provider may have acted


# seconds a refusal of the caller's credentials suggests before the next try: longer than RetryPolicy.max_wait,
# so the call ends at once as EffectDeferred, and long enough for a fixed key to be deployed
CREDENTIALS_RETRY_AFTER = 60.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """An adapter's reading of one exception."""

    outcome: Outcome
    error_class: str
    error_code: str | None = None
    retry_after: float | None = None  # seconds, from a Retry-After hint
    provider_result_id: str | None = None  # e.g. the PaymentIntent a declined card still created

    def __post_init__(self) -> None:
        """A hint in the past (a reset time read by a clock ahead of the provider's) means now, and one that is
        not a number says nothing: passed on, either would end the call in ``sleep`` as a bare ``ValueError``."""
        hint = self.retry_after
        if hint is not None and not hint >= 0:  # NaN fails every comparison
            object.__setattr__(self, "retry_after", 0.0 if hint < 0 else None)

    @classmethod
    def of(cls, error: BaseException, outcome: Outcome, code: str | None = None, **kw: Any) -> Verdict:
        return cls(outcome=outcome, error_class=type(error).__qualname__, error_code=code, **kw)

    @classmethod
    def credentials_refused(cls, error: BaseException, code: str | None = None) -> Verdict:
        """The provider refused the caller's own credentials (missing, wrong, expired, not allowed): it
        considered no request, and the same intent should go through once a deploy fixes them. Retryable,
        never final, with a hint long enough that the executor defers the call rather than retry it at once."""
        return cls.of(error, Outcome.RETRYABLE, code, retry_after=CREDENTIALS_RETRY_AFTER)

    @classmethod
    def of_status(
        cls, error: BaseException, status: object, code: str | None = None, *, retry_after: float | None = None
    ) -> Verdict:
        """What an HTTP status alone says, for an answer no finer rule of the provider's classified.

        401 and 403 refused the credentials (see :meth:`credentials_refused`); 408 and 429 mean "not now"
        (retryable, after ``retry_after`` when the answer gave one); any other 4xx refused the request as sent
        (final: nothing was done, and nothing will come to settle it). A 5xx, or no status, is unknown: the
        provider may have acted. A provider where some 4xx may follow an effect (Stripe's 409 for a key still
        running) checks that case first.
        """
        if status in (401, 403):
            return cls.credentials_refused(error, code)
        if status in (408, 429):
            return cls.of(error, Outcome.RETRYABLE, code, retry_after=retry_after)
        if isinstance(status, int) and 400 <= status < 500:
            return cls.of(error, Outcome.FINAL, code)
        return cls.of(error, Outcome.UNKNOWN, code)


class LookupStatus(StrEnum):
    FOUND = "found"  # the provider acted: confirm
    REFUSED = "refused"  # the provider saw it and refused it: reject
    ABSENT = "absent"  # proven never to have happened
    INCONCLUSIVE = "inconclusive"  # not found, which proves nothing


# the method of a lookup that failed (it raised, or the provider refused it: a revoked key, an outage, a 429).
# The ledger gives it to a lookup that raises; an adapter that catches its own errors reports it, so that the
# reconciler counts the record as an error (exit 1, its alert) rather than as "not found yet"
LOOKUP_ERROR = "lookup_error"
# The ledger puts it in the detail of a lookup whose "refused" or "absent" it took as inconclusive, saying why:
# the last request may still be running at the provider (_response_window.may_still_run)
HELD_BACK = "held_back"


@dataclass(frozen=True, slots=True)
class LookupResult:
    status: LookupStatus
    method: str  # e.g. "search", "retrieve", "activity_api", LOOKUP_ERROR
    provider_result_id: str | None = None
    response_digest: str | None = None
    evidence: str | None = None  # a reference an operator can follow
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EffectRequest:
    """What to send. ``params`` is digested; ``payload`` is what the adapter really sends, when it differs.

    Its repr shows the operation and the summary only: params and payload carry card data, addresses and
    message bodies, and a logged request must not."""

    operation: str
    params: Mapping[str, Any] = field(repr=False)
    payload: Any = field(default=None, repr=False)
    summary: Mapping[str, str] = field(default_factory=dict)  # operator-facing, no secrets

    def __post_init__(self) -> None:
        """Wrong types are refused here, by name, before a digest or a record is attempted."""
        operation: object = self.operation  # as given at runtime, whatever the annotations promise
        params: object = self.params
        summary: object = self.summary
        if not isinstance(operation, str) or not operation or not storable_text(operation):
            raise InvalidInput(f"EffectRequest.operation must be a non-empty, storable str (no NUL), got {operation!r}")
        if not isinstance(params, Mapping):
            raise InvalidInput(f"EffectRequest.params must be a mapping, got {type(params).__name__}")
        object.__setattr__(self, "summary", checked_summary(summary))  # a copy: the caller's dict may change


def checked_summary(summary: object) -> dict[str, str]:
    """A copy of ``summary`` if it maps str to storable str, else :class:`InvalidInput`. The executor checks a
    request's summary again as it records it: the dict is the caller's, and may have changed since."""
    if not isinstance(summary, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and storable_text(k + v) for k, v in summary.items()
    ):
        raise InvalidInput(f"EffectRequest.summary must map str to storable str (UTF-8, no NUL), got {summary!r}")
    return dict(summary)


def check_call(adapter: object, *request: object) -> None:
    """Refuse what is no adapter (``None``, an unset setting) or no :class:`EffectRequest` (a dict of params) by
    name, before anything is recorded; found later, each was an ``AttributeError`` from inside the ledger."""
    if not isinstance(getattr(adapter, "provider", None), str):
        raise InvalidInput(
            f"adapter must be a ProviderAdapter (a .provider name and its methods), got {type(adapter).__name__}"
        )
    for given in request:  # the call's request, when it takes one
        if not isinstance(given, EffectRequest):
            raise InvalidInput(f"request must be an EffectRequest, got {type(given).__name__}")


class ProviderAdapter(Protocol[ResponseT]):
    """One per provider package. The executor calls nothing else.

    Optional: ``refusal(request) -> str | None``, why this adapter cannot send ``request`` at all (one built
    only to look effects up, or a request it cannot carry), said before anything is recorded. The ledger
    then refuses a new intent through it with :class:`InvalidInput` and writes nothing, so the key stays free
    for an adapter that can send it. ``dispatch`` must still refuse such a request.
    """

    provider: str

    def contract_for(self, operation: str) -> ProviderContract:
        """The contract that governs ``operation``."""
        ...

    def provider_key(self, tenant: str, intent_key: IntentKey) -> str:
        """The key (or tag, or custom arg) that carries the intent to the provider, always the same."""
        ...

    def dispatch(self, request: EffectRequest, provider_key: str) -> ResponseT:
        """Send the request once; SDK-internal retries must be off."""
        ...

    def classify(self, error: BaseException) -> Verdict:
        """Definitive (retryable or final) or unknown, for any exception ``dispatch`` raised."""
        ...

    def result_id(self, response: ResponseT) -> str | None:
        """The provider's id for the effect (PaymentIntent id, X-Message-Id, MessageId)."""
        ...

    def response_digest(self, response: ResponseT) -> str:
        """A digest of the response, stored instead of the body."""
        ...

    def lookup(self, record: EffectRecord) -> LookupResult:
        """Ask the provider whether the effect happened, without causing it."""
        ...


def refusal_of(adapter: object, request: EffectRequest) -> str | None:
    """The adapter's own reason it cannot send ``request`` (its optional ``refusal`` hook), or None."""
    hook = getattr(adapter, "refusal", None)
    return hook(request) if callable(hook) else None
