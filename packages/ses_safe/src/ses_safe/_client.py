"""boto3 plumbing: drop-in ``ses``/``sesv2`` clients whose sends go through the ledger, retries forced off."""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypedDict, Unpack, cast, overload

import boto3
from botocore.config import Config

from safe_effects import (
    DEFAULT_TENANT,
    EffectRequest,
    IntentKey,
    InvalidInput,
    Ledger,
    MissingIntentKey,
    Receipt,
    UnguardedCall,
    check_ledger,
    check_tenant,
)

from ._adapter import Insights, SendPayload, SesAdapter
from ._contract import CONNECT_TIMEOUT, READ_TIMEOUT
from ._params import check_params
from ._tags import check_caller_tags

if TYPE_CHECKING:  # boto3-stubs, where installed: the wrapped clients are typed as boto3's own
    from mypy_boto3_ses import SESClient
    from mypy_boto3_ses.type_defs import SendEmailRequestTypeDef as SesSendEmail
    from mypy_boto3_ses.type_defs import SendRawEmailRequestTypeDef as SesSendRawEmail
    from mypy_boto3_ses.type_defs import SendTemplatedEmailRequestTypeDef as SesSendTemplatedEmail
    from mypy_boto3_sesv2 import SESV2Client
    from mypy_boto3_sesv2.type_defs import SendEmailRequestTypeDef as V2SendEmail

    _SESBase = SESClient
    _SESV2Base = SESV2Client
else:
    _SESBase = _SESV2Base = object

INTENT_KWARG = "IntentKey"
SERVICE_NAMES = ("ses", "sesv2")  # exactly as boto3 names them
# Sends the ledger cannot guard: several messages per call (one intent has one MessageId), or mail that is
# not the caller's message (bounces, verification mail). Refused on the wrapped client, never passed through.
_UNGUARDED_SENDS = {
    "ses": frozenset({"send_bulk_templated_email", "send_custom_verification_email", "send_bounce"}),
    "sesv2": frozenset({"send_bulk_email", "send_custom_verification_email"}),
}
_log = logging.getLogger("ses_safe")


class SafeEffectsMarker(TypedDict):
    """What the ledger says about a send's answer: ``FromLedger`` when no request was made for it."""

    FromLedger: bool
    IntentKey: str
    Tenant: str
    Status: str


class SendResponse(TypedDict):
    """A send's answer: boto3's (``MessageId``, ``ResponseMetadata``), or one shaped like it when the ledger
    answered. ``MessageId`` is None only for an intent settled without one (an operator's decision)."""

    MessageId: str | None
    ResponseMetadata: Mapping[str, Any]
    SafeEffects: SafeEffectsMarker


class MissingConfigurationSet(InvalidInput):
    """A send without a configuration set publishes no events, so an unknown could never be reconciled."""

    code = "missing_configuration_set"


def _check_service_name(service_name: object) -> None:
    """Only boto3's exact names: any other (``"SES"``, ``"ses-v2"``) would build the wrong client, and a send
    shaped for the other API would fail validation and burn its intent as rejected."""
    if service_name not in SERVICE_NAMES:
        raise InvalidInput(f"ses_safe.client wraps {' or '.join(map(repr, SERVICE_NAMES))}, got {service_name!r}")


def boundary_config(*, connect_timeout: float, read_timeout: float, base: Config | None = None) -> Config:
    """One attempt and explicit timeouts; set in code so AWS_MAX_ATTEMPTS / ~/.aws/config cannot undo it."""
    forced = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )
    return base.merge(forced) if base is not None else forced


def _digestible(value: Any) -> Any:
    """Raw MIME bytes are not JSON: digest them by SHA-256 so the ledger can compare requests."""
    if isinstance(value, bytes | bytearray):
        return {"bytes_sha256": hashlib.sha256(value).hexdigest()}
    if isinstance(value, Mapping):
        return {key: _digestible(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_digestible(item) for item in value]
    return value


class _SafeClient:
    """Shared wrapper: sends go through ``ledger.execute``; any other attribute is the sending client's.

    One boto3 client (``adapter.client``, one attempt, explicit timeouts) serves the guarded sends *and* every
    forwarded attribute, ``meta`` included: a ``Stubber(wrapped)`` or a hook on ``wrapped.meta.events`` sees the
    sends exactly as on a plain boto3 client. Two clients sharing one event emitter is not an option: botocore
    registers each client's request signer and retry handler on its own emitter (the retry handler under the
    unique id ``retry-config-<service>``, so the second client's would be dropped and one retry policy would
    govern both). The price: pass-through calls get one attempt too; ``without_ledger`` keeps yours.
    """

    _service: str
    _tags_field: str

    def __init__(
        self,
        *,
        raw: Any,
        adapter: SesAdapter,
        ledger: Ledger,
        tenant: str,
        configuration_set: str | None,
    ) -> None:
        self._raw = raw  # the plain client with the caller's config: without_ledger only
        self._adapter = adapter
        self._ledger = check_ledger(ledger, f"ses_safe.{type(self).__name__}")
        self._tenant = check_tenant(tenant)
        self._configuration_set = configuration_set

    @property
    def adapter(self) -> SesAdapter:
        return self._adapter

    if not TYPE_CHECKING:  # to a type checker, the client's own methods (boto3-stubs): a misspelt one is an error

        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):  # never forward private names (copy/pickle probe them before __init__ ran)
                raise AttributeError(name)
            if name in _UNGUARDED_SENDS[self._service]:
                return functools.partial(_refuse, f"{self._service}.{name}")
            return getattr(self._adapter.client, name)

    def without_ledger(self, *, reason: str) -> Any:
        """A second, plain boto3 client with your own config and retries, for sends you have declared safe to
        repeat (or calls you want botocore to retry). A ``Stubber`` or hook on this wrapper does not reach it."""
        if not reason.strip():
            raise ValueError("without_ledger needs a reason: say why these sends are safe to repeat")
        _log.info("ses_safe: ledger bypassed: %s", reason)
        return self._raw

    def _send(self, method: str, kwargs: dict[str, Any]) -> SendResponse:
        intent_key = kwargs.pop(INTENT_KWARG, None)
        if intent_key is None:
            raise MissingIntentKey(f"{self._service}.{method} needs {INTENT_KWARG}='object:id:action:v1'")
        configuration_set = kwargs.get("ConfigurationSetName") or self._configuration_set
        if not configuration_set:
            raise MissingConfigurationSet(
                f"{self._service}.{method}: pass ConfigurationSetName or configuration_set= to the client; "
                "without event publishing an unknown send can never be reconciled"
            )
        sent = {**kwargs, "ConfigurationSetName": configuration_set}
        check_params(self._adapter.client, method, sent)
        check_caller_tags(kwargs.get(self._tags_field))
        request = EffectRequest(
            operation=f"{self._service}.{method}",
            params=_digestible(kwargs),
            payload=SendPayload(
                method=method,
                kwargs=sent,
                tags_field=self._tags_field,
                tenant=self._tenant,
            ),
            summary={"configuration_set": configuration_set},
        )
        receipt = self._ledger.execute(self._adapter, request, intent_key=intent_key, tenant=self._tenant)
        return _response(receipt, self._tenant)


def _refuse(operation: str, **_: Any) -> NoReturn:
    raise UnguardedCall(
        f"{operation} is not guarded by the ledger (it sends several messages, or mail that is not yours), so "
        "the wrapped client refuses it: send one message per intent with send_email, or use "
        "client.without_ledger(reason=...) for sends you have declared safe to repeat"
    )


def _response(receipt: Receipt[Any], tenant: str) -> SendResponse:
    """The boto3 response, or one shaped like it when the ledger answered; ``SafeEffects`` says which."""
    record = receipt.record
    marker = SafeEffectsMarker(
        FromLedger=receipt.from_ledger or receipt.response is None,
        IntentKey=str(record.intent_key),
        Tenant=tenant,
        Status=record.status.value,
    )
    if isinstance(receipt.response, dict):
        return cast(SendResponse, {**receipt.response, "SafeEffects": marker})
    metadata = {"RequestId": "", "HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0}
    return SendResponse(MessageId=record.provider_result_id, ResponseMetadata=metadata, SafeEffects=marker)


class SafeSESClient(_SafeClient, _SESBase):
    """Drop-in for ``boto3.client("ses")``: ``send_email``, ``send_raw_email`` and ``send_templated_email``
    need ``IntentKey=``. Typed as boto3-stubs' ``SESClient`` where those are installed, sends and all."""

    _service = "ses"
    _tags_field = "Tags"

    if TYPE_CHECKING:  # IntentKey required, the rest as boto3-stubs type the call; at run time see _send

        def send_email(  # type: ignore[override]
            self, *, IntentKey: IntentKey | str, **kwargs: Unpack[SesSendEmail]
        ) -> SendResponse: ...
        def send_raw_email(  # type: ignore[override]
            self, *, IntentKey: IntentKey | str, **kwargs: Unpack[SesSendRawEmail]
        ) -> SendResponse: ...
        def send_templated_email(  # type: ignore[override]
            self, *, IntentKey: IntentKey | str, **kwargs: Unpack[SesSendTemplatedEmail]
        ) -> SendResponse: ...
        def without_ledger(self, *, reason: str) -> SESClient: ...

    else:

        def send_email(self, **kwargs: Any) -> SendResponse:
            return self._send("send_email", kwargs)

        def send_raw_email(self, **kwargs: Any) -> SendResponse:
            return self._send("send_raw_email", kwargs)

        def send_templated_email(self, **kwargs: Any) -> SendResponse:
            return self._send("send_templated_email", kwargs)


class SafeSESv2Client(_SafeClient, _SESV2Base):
    """Drop-in for ``boto3.client("sesv2")``: ``send_email`` needs ``IntentKey=``. Typed as boto3-stubs'
    ``SESV2Client`` where those are installed, sends and all."""

    _service = "sesv2"
    _tags_field = "EmailTags"

    if TYPE_CHECKING:

        def send_email(  # type: ignore[override]
            self, *, IntentKey: IntentKey | str, **kwargs: Unpack[V2SendEmail]
        ) -> SendResponse: ...
        def without_ledger(self, *, reason: str) -> SESV2Client: ...

    else:

        def send_email(self, **kwargs: Any) -> SendResponse:
            return self._send("send_email", kwargs)


class ClientOptions(TypedDict, total=False):
    """:func:`client`'s keyword options: the wrapper's own, then ``boto3.client``'s."""

    tenant: str
    configuration_set: str | None
    connect_timeout: float
    read_timeout: float
    config: Config | None
    session: boto3.session.Session | None
    api_version: str | None
    use_ssl: bool
    verify: bool | str | None
    endpoint_url: str | None
    aws_access_key_id: str | None
    aws_secret_access_key: str | None
    aws_session_token: str | None
    aws_account_id: str | None


@overload
def client(
    service_name: Literal["ses"], region_name: str | None = None, *, ledger: Ledger, **options: Unpack[ClientOptions]
) -> SafeSESClient: ...
@overload
def client(
    service_name: Literal["sesv2"], region_name: str | None = None, *, ledger: Ledger, **options: Unpack[ClientOptions]
) -> SafeSESv2Client: ...
def client(
    service_name: Literal["ses", "sesv2"],
    region_name: str | None = None,
    *,
    ledger: Ledger,
    tenant: str = DEFAULT_TENANT,
    configuration_set: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    read_timeout: float = READ_TIMEOUT,
    config: Config | None = None,
    session: boto3.session.Session | None = None,
    **client_kwargs: Any,
) -> SafeSESClient | SafeSESv2Client:
    """Like ``boto3.client(service_name, region_name, ...)``; one attempt and explicit timeouts for every call
    (see ``_SafeClient``), sends through ``ledger``. ``without_ledger`` and insights lookups use your ``config``."""
    _check_service_name(service_name)
    check_ledger(ledger, "ses_safe.client")
    client_kwargs = {"region_name": region_name, **client_kwargs}
    session = session or _default_session()
    forced = boundary_config(connect_timeout=connect_timeout, read_timeout=read_timeout, base=config)
    if service_name == "ses":
        ses_client: SESClient = session.client("ses", config=forced, **client_kwargs)
        ses_plain: SESClient = session.client("ses", config=config, **client_kwargs)
        adapter = SesAdapter(ses_client, insights=_v2_insights(session, config, client_kwargs))
        return SafeSESClient(
            raw=ses_plain, adapter=adapter, ledger=ledger, tenant=tenant, configuration_set=configuration_set
        )
    v2_client: SESV2Client = session.client("sesv2", config=forced, **client_kwargs)
    v2_plain: SESV2Client = session.client("sesv2", config=config, **client_kwargs)
    adapter = SesAdapter(v2_client, insights=lambda message_id: v2_plain.get_message_insights(MessageId=message_id))
    return SafeSESv2Client(
        raw=v2_plain, adapter=adapter, ledger=ledger, tenant=tenant, configuration_set=configuration_set
    )


def _default_session() -> boto3.session.Session:
    """The session ``boto3.client`` uses: its region, credentials and event hooks (``boto3.setup_default_session``)
    are the wrapped client's too. The wrapper's timeouts and single attempt go into each client's own config."""
    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    return boto3.DEFAULT_SESSION


def _v2_insights(session: boto3.session.Session, config: Config | None, client_kwargs: Mapping[str, Any]) -> Insights:
    """Message insights live in sesv2 only: a v1 wrapper opens a v2 client on its first lookup."""

    @functools.cache
    def v2() -> SESV2Client:
        return session.client("sesv2", config=config, **client_kwargs)

    return lambda message_id: v2().get_message_insights(MessageId=message_id)
