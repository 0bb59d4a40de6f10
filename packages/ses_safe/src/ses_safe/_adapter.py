"""``SesAdapter``: the ``safe_effects.ProviderAdapter`` for SES sends (one per wrapped boto3 client)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from safe_effects import (
    DeployCheck,
    EffectRecord,
    EffectRequest,
    IntentKey,
    InvalidInput,
    LookupResult,
    LookupStatus,
    ProviderContract,
    Verdict,
    request_digest,
)

from ._classify import classify
from ._contract import CONTRACTS, PROVIDER
from ._publishing import check_event_publishing
from ._tags import INTENT_TAG, intent_tag, with_intent_tags

Response = dict[str, Any]
Insights = Callable[[str], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class SendPayload:
    """What ``dispatch`` sends: the boto3 kwargs, tagged at dispatch time with the ledger's provider key."""

    method: str  # boto3 method name: "send_email", "send_raw_email"
    kwargs: Mapping[str, Any] = field(repr=False)  # addresses, subject, body: not for a log line
    tags_field: str  # "Tags" (v1) or "EmailTags" (v2)
    tenant: str

    def tagged(self, provider_key: str) -> dict[str, Any]:
        """The kwargs with the intent and tenant tags appended to the caller's own."""
        tags = with_intent_tags(self.kwargs.get(self.tags_field), tenant=self.tenant, tag=provider_key)
        return {**self.kwargs, self.tags_field: tags}


# what the deploy check reads of the environment: the configuration sets the sends use
CONFIGURATION_SETS_ENV = "SES_SAFE_CONFIGURATION_SETS"


class SesAdapter:
    """Sends through a boto3 client whose retries are off; looks up by MessageId when one is known."""

    provider = PROVIDER

    def __init__(self, client: Any, *, insights: Insights | None = None) -> None:
        self._client = client
        self._insights = insights

    @property
    def client(self) -> Any:
        """The boto3 client sends go through (one attempt, explicit timeouts)."""
        return self._client

    def deploy_check(self, env: Mapping[str, str]) -> DeployCheck:
        """Each configuration set named in ``SES_SAFE_CONFIGURATION_SETS`` (comma-separated) publishes what settles
        a lost send where the event poller reads it (:func:`ses_safe.check_event_publishing`). Reads only."""
        names = [name.strip() for name in env.get(CONFIGURATION_SETS_ENV, "").split(",") if name.strip()]
        if not names:
            why = f"{CONFIGURATION_SETS_ENV} is not set: name the configuration sets your sends use to check them"
            return DeployCheck(PROVIDER, unchecked=(why,))
        if not hasattr(self._client, "get_configuration_set_event_destinations"):
            why = f"the adapter's client is not sesv2, which checking what {', '.join(names)} publish needs"
            return DeployCheck(PROVIDER, unchecked=(why,))
        checked: list[str] = []
        problems: list[str] = []
        for name in names:
            try:
                report = check_event_publishing(self._client, name)
            except (ClientError, BotoCoreError) as refused:
                problems.append(f"SES did not say what configuration set {name!r} publishes ({refused})")
                continue
            problems += report.problems
            if report.ok:
                kinds = ", ".join(sorted(report.event_types))
                checked.append(f"configuration set {name!r} publishes {kinds} to {', '.join(report.destinations)}")
        return DeployCheck(PROVIDER, checked=tuple(checked), problems=tuple(problems))

    def contract_for(self, operation: str) -> ProviderContract:
        contract = CONTRACTS.get(operation)
        if contract is None:  # an operator's typo in `compensate --operation`, say: named, typed, nothing written
            raise InvalidInput(f"SES has no operation {operation!r}; ses_safe knows {', '.join(CONTRACTS)}")
        return contract

    def provider_key(self, tenant: str, intent_key: IntentKey) -> str:
        return intent_tag(intent_key)

    def refusal(self, request: EffectRequest) -> str | None:
        """A request ses_safe's client did not build (an operator's compensate has params only) cannot be sent."""
        if isinstance(request.payload, SendPayload):
            return None
        return (
            f"SesAdapter sends what ses_safe's client builds (a SendPayload), got {type(request.payload).__name__}: "
            "send through ses_safe.client(...)"
        )

    def dispatch(self, request: EffectRequest, provider_key: str) -> Response:
        payload = request.payload
        if not isinstance(payload, SendPayload):  # before any I/O; the ledger refuses a new intent sooner
            raise InvalidInput(str(self.refusal(request)))
        method = getattr(self._client, payload.method)
        response: Response = method(**payload.tagged(provider_key))
        return response

    def classify(self, error: BaseException) -> Verdict:
        return classify(error)

    def result_id(self, response: Response) -> str | None:
        """Raise on a 2xx without MessageId (botocore reads a cut JSON body as {}): the ledger keeps it unknown."""
        message_id = response.get("MessageId")
        if not isinstance(message_id, str) or not message_id:
            raise ValueError("SES answered without a MessageId: the body was cut or unreadable")
        return message_id

    def response_digest(self, response: Response) -> str:
        return request_digest({"MessageId": response.get("MessageId")})

    def lookup(self, record: EffectRecord) -> LookupResult:
        """Ask message insights when a MessageId is known; otherwise wait for SES events (absence proves nothing)."""
        waiting = f"waiting for an SES event tagged {INTENT_TAG}={record.provider_key}"
        message_id = record.provider_result_id
        if message_id is None or self._insights is None:
            return LookupResult(LookupStatus.INCONCLUSIVE, "event_stream", evidence=waiting)
        try:
            insights = self._insights(message_id)
        except (ClientError, BotoCoreError) as error:
            detail = {"error": type(error).__name__}
            return LookupResult(LookupStatus.INCONCLUSIVE, "retrieve", evidence=waiting, detail=detail)
        return LookupResult(
            LookupStatus.FOUND,
            "retrieve",
            provider_result_id=message_id,
            response_digest=request_digest({"MessageId": message_id}),
            evidence=f"sesv2 get_message_insights MessageId={message_id}",
            detail={"insight_destinations": len(insights.get("Insights") or ())},
        )
