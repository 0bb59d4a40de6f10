"""SDK plumbing: a ``stripe.StripeClient`` whose requestor routes every write (POST, DELETE) through the ledger.

The seam is ``_APIRequestor.request``: every v1/v2 service method (``client.v1.payment_intents.create`` and
the ~500 others) ends there with the SDK's own call shape (method, url, params, options), so one override
covers them all; their ``_async`` twins end in ``request_async``, which runs it in a worker thread. Objects
the SDK returns carry the same guarded requestor, so their instance methods are guarded too, and so are the
objects inside an error a write raised (a decline's PaymentIntent). Reads pass straight through.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import anyio.to_thread
import stripe
from stripe._api_requestor import _APIRequestor
from stripe._base_address import BaseAddress, BaseAddresses
from stripe._http_client import new_http_client_async_fallback
from stripe._oauth_service import OAuthService
from stripe._request_options import RequestOptions
from stripe._requestor_options import RequestorOptions
from stripe._stripe_response import StripeStreamResponse, StripeStreamResponseAsync
from stripe._util import _convert_to_stripe_object
from stripe._v1_services import V1Services
from stripe._v2_services import V2Services
from urllib3.util.retry import Retry

from safe_effects import (
    DEFAULT_TENANT,
    EffectRecord,
    EffectRequest,
    IntentKey,
    InvalidInput,
    InvalidIntentKey,
    Ledger,
    MissingIntentKey,
    ProviderContract,
    Receipt,
    SafeEffectsError,
    UnguardedCall,
    check_ledger,
    check_tenant,
)

from ._adapter import StripeAdapter, StripeCall, scope_options
from ._classify import error_code
from ._contract import (
    CONNECT_TIMEOUT,
    NO_READ_BACK,
    READ_TIMEOUT,
    RESERVED_HEADERS,
    deleted_object_type,
    operation_for,
    read_params,
    reserved_header,
    retrieve_paths,
    scope_of,
    stamp_metadata,
    summary_for,
    writes,
)
from ._refund_target import REFUND, check_refund_target
from ._wire import as_sent

_log = logging.getLogger("stripe_safe")
_RECEIPT_ATTRIBUTE = "_safe_effects_receipt"  # StripeObject keeps underscore names out of its fields

KEY_HINT = (
    "a safe StripeClient write needs options={'idempotency_key': <intent key>} (an object's own method, such as "
    "pi.cancel(idempotency_key=<intent key>), takes it as a keyword) naming the business intent as "
    "object_type:object_id:action:vN, e.g. IntentKey.build('invoice', 'inv_42', 'collect') == "
    "'invoice:inv_42:collect:v1' (never a random value or an attempt number); for a call you have checked is "
    "safe to repeat, use client.without_ledger(reason=...)"
)


class AnswerUnavailable(SafeEffectsError):
    """A repeated call of a confirmed intent whose answer cannot be rebuilt: no GET serves the object, and a
    same-key replay is no longer certain to be deduped by Stripe. The effect happened once; nothing was resent."""

    code = "answer_unavailable"

    def __init__(self, record: EffectRecord, why: str) -> None:
        self.intent_key, self.record = record.intent_key, record
        made = f"object {record.provider_result_id}" if record.provider_result_id else "an object without an id"
        super().__init__(
            f"intent {record.intent_key!r} is confirmed ({made}) but its answer cannot be rebuilt: {why}; "
            "nothing was sent again"
        )


def _no_replay(contract: ProviderContract, record: EffectRecord) -> str:
    """Why a same-key replay of ``record`` may not be sent."""
    deadline = None if record.first_dispatched_at is None else contract.replay_deadline(record.first_dispatched_at)
    if deadline is None:
        return f"{record.operation} has no same-key replay"
    return f"Stripe's key window for a same-key replay closed at {deadline.isoformat()} (margin included)"


def _error_label(error: stripe.StripeError) -> str:
    """A Stripe error by class, code and HTTP status: its message can quote the call's params (an email, a
    return URL), and this text reaches worker logs; the error itself stays the ``__cause__``."""
    status = f"HTTP {error.http_status}" if error.http_status is not None else "no HTTP status"
    return f"{type(error).__name__}: {error_code(error) or 'no code'}, {status}"


def _refuse_reserved_headers(options: RequestOptions | None) -> None:
    """The SDK applies ``options["headers"]`` over its own: an Idempotency-Key there would replace the ledger's
    key, a Stripe-Account or Stripe-Context would act on an account the ledger never recorded."""
    given: Any = (options or {}).get("headers") or {}
    try:
        names = list(dict(given))  # a mapping or pairs, as the SDK itself takes them
    except (TypeError, ValueError) as bad:
        raise InvalidInput(f"options['headers'] must be a mapping of header names to values: {bad}") from bad
    _refuse_header(reserved_header(names), "options['headers']")


def _refuse_header(header: str | None, where: str) -> None:
    if header is not None:
        raise InvalidInput(
            f"{where} sets {header!r}, which a safe StripeClient write takes from request options only: "
            f"use {RESERVED_HEADERS[header.strip().lower()]} instead"
        )


def _refuse_resending_adapters(session: object) -> None:
    """requests' ``HTTPAdapter`` retries through urllib3: mounted with retries of read errors, statuses or other
    errors, a write whose answer was lost would be sent again behind the ledger (the SDK's own retries are
    off for every write). A connect error is retried before anything is sent, so that alone is allowed."""
    adapters: Mapping[str, object] = getattr(session, "adapters", None) or {}
    for prefix, adapter in adapters.items():
        retry = getattr(adapter, "max_retries", None)
        if not isinstance(retry, Retry) or retry.total in (0, False):
            continue
        if any(count not in (0, False) for count in (retry.read, retry.status, retry.other)):
            raise InvalidInput(
                f"the http_client's session's adapter for {prefix!r} retries ({retry!r}): it would send a write "
                "whose answer was lost a second time, behind the ledger. Mount requests.adapters."
                "HTTPAdapter(max_retries=0) for Stripe (the wrapper retries what is safe to retry itself), or "
                "limit the Retry to connect errors (read=0, status=0, other=0)"
            )


def _intent_key(options: RequestOptions | None) -> IntentKey:
    """The intent named by the caller's idempotency key; refuse a missing or malformed one before sending."""
    raw = (options or {}).get("idempotency_key")
    if not raw:
        raise MissingIntentKey(f"no idempotency_key: {KEY_HINT}")
    try:
        return _header_safe(IntentKey.parse(raw))
    except InvalidIntentKey as bad:
        raise InvalidIntentKey(f"{bad}; {KEY_HINT}") from bad


def _header_safe(key: IntentKey) -> IntentKey:
    """``key``, if it fits the Idempotency-Key header: requests writes header values as Latin-1, and a key it
    cannot write fails inside the SDK after the ledger recorded the attempt, as an unknown outcome."""
    try:
        key.encode("latin-1")
    except UnicodeEncodeError:
        raise InvalidIntentKey(
            f"intent key {key!r} has characters an HTTP header cannot carry (it is sent as Idempotency-Key): "
            "build keys from ids, in ASCII"
        ) from None
    return key


_SERVICE_INSTEAD = (
    "make the call through its service (client.v1.<service>.<method>, or its _async twin), which the ledger guards"
)


def _refuse_write(method: str, url: str, via: str) -> None:
    if writes(method, url):
        raise UnguardedCall(
            f"{via} {method.upper()} {url}: the ledger guards only service calls, so nothing was recorded or "
            f"sent; {_SERVICE_INSTEAD}"
        )


def _key_fingerprint(options: RequestOptions | None, carried: str | None, client_key: str | None) -> dict[str, str]:
    """A per-call ``api_key``'s SHA-256 prefix for the digest: the same intent key sent with another account's
    key is another action (an IntentConflict), not a repeat of the first account's (answered from the ledger,
    so the second account would never be charged). Empty without one, so other calls digest as before.

    A key the requestor ``carried`` other than the client's own is per call too: the SDK keeps a call's
    ``api_key`` in the objects it returns, and their writes go out under it."""
    api_key = (options or {}).get("api_key") or (carried if carried != client_key else None)
    return {"api_key_sha256": hashlib.sha256(api_key.encode()).hexdigest()[:16]} if api_key else {}


def _read_options(options: RequestOptions | None, scope: Mapping[str, str]) -> RequestOptions:
    """Options for reading back what a call wrote: its account, and its own api_key and stripe_version."""
    read, given = scope_options(scope), options or {}
    if given.get("api_key"):
        read["api_key"] = given["api_key"]
    if given.get("stripe_version"):
        read["stripe_version"] = given["stripe_version"]
    return read


def _rebind(value: object, requestor: _APIRequestor) -> None:
    """Bind every StripeObject in ``value`` (the SDK built them on its global requestor) to ``requestor``."""
    if isinstance(value, stripe.StripeObject):
        value._requestor = requestor
        for inner in value.to_dict(recursive=False).values():  # a shallow copy: nested objects are shared
            _rebind(inner, requestor)
    elif isinstance(value, list):
        for inner in value:
            _rebind(inner, requestor)


class _LedgerRequestor(_APIRequestor):
    """An ``_APIRequestor`` that sends writes (POST, DELETE) through ``Ledger.execute`` (or ``compensate``).

    A view's requestor carries a compensation link or an intent of its own. The SDK calls it makes go through
    a plain ``transport`` requestor, so the objects they return (and their instance methods) are guarded
    like any other call, not bound to the view's intent.
    """

    def __init__(
        self,
        options: RequestorOptions,
        client: stripe.HTTPClient,
        *,
        ledger: Ledger,
        tenant: str,
        compensates: IntentKey | None = None,
        intent: IntentKey | None = None,
        client_key: str | None = None,
    ) -> None:
        super().__init__(options=options, client=client)
        self.ledger, self.tenant, self.compensates, self.intent = ledger, tenant, compensates, intent
        # the StripeClient's own key, which the digest leaves out: another one this requestor carries is per call
        self.client_key = options.api_key if client_key is None else client_key
        viewed = compensates is not None or intent is not None
        self.transport = (
            _LedgerRequestor(options, client, ledger=ledger, tenant=tenant, client_key=self.client_key)
            if viewed
            else self
        )
        self.adapter = StripeAdapter(self.transport)

    def _new_requestor_with_options(self, options: RequestOptions | None) -> _LedgerRequestor:
        return self._sibling(options, compensates=self.compensates, intent=self.intent)

    def viewed(self, *, compensates: IntentKey | None = None, intent: IntentKey | None = None) -> _LedgerRequestor:
        """This requestor for a view: plus a compensation link, or an intent named up front."""
        return self._sibling(None, compensates=compensates or self.compensates, intent=intent or self.intent)

    def rescoped(self, options: RequestorOptions) -> _LedgerRequestor:
        """This requestor (and view) on other requestor options, e.g. another Stripe-Context."""
        assert self._client is not None  # always set: the client is built with an http_client
        return _LedgerRequestor(
            options,
            self._client,
            ledger=self.ledger,
            tenant=self.tenant,
            compensates=self.compensates,
            intent=self.intent,
            client_key=self.client_key,
        )

    def _sibling(
        self, options: RequestOptions | None, *, compensates: IntentKey | None, intent: IntentKey | None
    ) -> _LedgerRequestor:
        plain = super()._new_requestor_with_options(options)
        assert plain._client is not None  # always set: the client is built with an http_client
        return _LedgerRequestor(
            plain._options,
            plain._client,
            ledger=self.ledger,
            tenant=self.tenant,
            compensates=compensates,
            intent=intent,
            client_key=self.client_key,
        )

    def _intent_for(self, options: RequestOptions | None) -> IntentKey:
        """The view's intent, else the caller's idempotency key; two different ones for one call are refused."""
        if self.intent is None:
            return _intent_key(options)
        given = (options or {}).get("idempotency_key")
        if given and given != self.intent:
            raise InvalidInput(
                f"this client view writes intent {self.intent!r} but options name idempotency_key {given!r}: "
                "name the intent once"
            )
        return self.intent

    def request(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None = None,
        options: RequestOptions | None = None,
        *,
        base_address: BaseAddress,
        usage: list[str] | None = None,
    ) -> stripe.StripeObject:
        if not writes(method, url):
            if self.transport is not self:  # a view's reads, too, return objects not bound to the view
                return self.transport.request(method, url, params, options, base_address=base_address, usage=usage)
            return super().request(method, url, params, options, base_address=base_address, usage=usage)
        _refuse_reserved_headers(options)
        intent = self._intent_for(options)
        path = url.split("?", 1)[0]
        operation = operation_for(path, method)
        caller = dict(params or {})
        stamped = stamp_metadata(operation, caller, intent, self.tenant)
        ours = {"stripe_account": self._options.stripe_account, "stripe_context": self._options.stripe_context}
        scope = scope_of(options, ours)  # the account the call acts on: per call, else the client's
        request = EffectRequest(
            operation=operation,
            # the digest covers the caller's call and its account, not our metadata; a per-call api_key (another
            # account's, the SDK's way to serve many) by a fingerprint, never the secret itself
            params={
                "path": path,
                "params": as_sent(caller),
                **scope,
                **_key_fingerprint(options, self._options.api_key, self.client_key),
            },
            payload=StripeCall(method, url, stamped, options or {}, base_address, usage),
            summary=summary_for(path, caller, method, scope),
        )
        read = _read_options(options, scope)
        if self.compensates is None:
            receipt = self.ledger.execute(self.adapter, request, intent_key=intent, tenant=self.tenant)
        else:
            receipt = self._compensation(self.compensates, request, intent, read)
        answer: stripe.StripeObject = (
            receipt.response if receipt.response is not None else self._rebuilt(receipt.record, request, caller, read)
        )
        setattr(answer, _RECEIPT_ATTRIBUTE, receipt)
        return answer

    def _compensation(
        self, original_key: IntentKey, request: EffectRequest, intent: IntentKey, read: RequestOptions
    ) -> Receipt[stripe.StripeObject]:
        """``request`` run as the compensation of ``original_key``; a refund only of the original's own payment."""
        if request.operation == REFUND:
            original = self.ledger.get(original_key, tenant=self.tenant)
            check_refund_target(
                original, request.params["params"], functools.partial(self._intent_of_charge, read=read)
            )
        return self.ledger.compensate(
            self.adapter, request, original_key=original_key, compensating_key=intent, tenant=self.tenant
        )

    def _intent_of_charge(self, charge: str, read: RequestOptions) -> object:
        """The PaymentIntent a charge belongs to, by a GET on the call's account (a read, never a write)."""
        found = self.transport.read(f"/v1/charges/{quote(charge, safe='')}", None, read)
        return found.to_dict(recursive=False).get("payment_intent")

    def _rebuilt(
        self, record: EffectRecord, request: EffectRequest, caller: Mapping[str, Any], read: RequestOptions
    ) -> stripe.StripeObject:
        """The answer to a repeated call of a confirmed intent: a GET of the recorded object, shaped by the call's
        ``expand`` / ``include``; else Stripe's saved answer by a same-key replay."""
        path: str = request.params["path"]
        if request.operation in NO_READ_BACK:  # an account link, an OAuth token, a portal session: nothing to GET
            return self._replayed(record, request)
        if record.provider_result_id is None:
            raise AnswerUnavailable(record, "no object id was recorded to read it back by")
        missing: stripe.InvalidRequestError | None = None
        tried = retrieve_paths(path, record.provider_result_id)
        for where in tried:
            try:
                return self.transport.read(where, read_params(path, caller), read)  # a read, never a write
            except stripe.InvalidRequestError as error:
                if error.http_status != 404:
                    raise
                missing = error
        if request.operation.endswith(".delete"):
            # most deleted objects are gone for a GET: answer with Stripe's own shape of a delete's answer
            gone = {"id": record.provider_result_id, "object": deleted_object_type(path), "deleted": True}
            return _convert_to_stripe_object(resp=gone, requestor=self.transport, api_mode="V1")
        why = f"GET {' and '.join(tried)} found nothing (written with another API key or account?)"
        raise AnswerUnavailable(record, why) from missing  # never a resend: the write is confirmed

    def _replayed(self, record: EffectRecord, request: EffectRequest) -> stripe.StripeObject:
        """Stripe's saved answer: the same call under the key it was first sent with, which Stripe replays without
        acting again, but only while the contract says Stripe still holds that key (window minus margin), and
        only if Stripe says it replayed (``Idempotent-Replayed``) rather than ran the call again."""
        contract = self.adapter.contract_for(request.operation)
        if record.provider_key is None or not contract.can_replay(record.first_dispatched_at, self.ledger.clock()):
            raise AnswerUnavailable(record, _no_replay(contract, record))
        try:
            answer = self.adapter.dispatch(request, record.provider_key)
        except stripe.StripeError as failed:
            raise AnswerUnavailable(record, f"the same-key replay failed ({_error_label(failed)})") from failed
        replayed = answer.last_response is not None and answer.last_response.headers.get("Idempotent-Replayed")
        if replayed != "true":
            made = answer.to_dict(recursive=False).get("id") or "an object"
            raise AnswerUnavailable(record, f"Stripe did not replay the key but ran the call again (made {made})")
        return answer

    async def request_async(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None = None,
        options: RequestOptions | None = None,
        *,
        base_address: BaseAddress,
        usage: list[str] | None = None,
    ) -> stripe.StripeObject:
        """Reads as the SDK makes them. A write (``create_async`` ...) is the synchronous, ledger-guarded call run
        in a worker thread, anyio's, so under asyncio or trio: the ledger and the SDK's requests client are
        synchronous. A cancelled await returns at once and leaves the call to finish in its thread, where its
        outcome is recorded, so a claim is never left half-done by a timeout."""
        if not writes(method, url):
            if self.transport is not self:  # as in request: a view's reads return objects not bound to the view
                return await self.transport.request_async(
                    method, url, params, options, base_address=base_address, usage=usage
                )
            return await super().request_async(method, url, params, options, base_address=base_address, usage=usage)
        guarded = functools.partial(self.request, method, url, params, options, base_address=base_address, usage=usage)
        answer: stripe.StripeObject = await anyio.to_thread.run_sync(guarded, abandon_on_cancel=True)
        return answer

    def request_stream(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None = None,
        options: RequestOptions | None = None,
        *,
        base_address: BaseAddress,
        usage: list[str] | None = None,
    ) -> StripeStreamResponse:
        _refuse_write(method, url, "a streaming")
        return super().request_stream(method, url, params, options, base_address=base_address, usage=usage)

    async def request_stream_async(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None = None,
        options: RequestOptions | None = None,
        *,
        base_address: BaseAddress,
        usage: list[str] | None = None,
    ) -> StripeStreamResponseAsync:
        _refuse_write(method, url, "an async streaming")
        return await super().request_stream_async(method, url, params, options, base_address=base_address, usage=usage)

    # -- the adapter's transport --------------------------------------------------------------------------

    def send(self, call: StripeCall, idempotency_key: str) -> stripe.StripeObject:
        """One write with the SDK's retries off, whatever the caller's options said; a POST carries the ledger's
        key (Stripe ignores keys on a DELETE, so none is sent there). Objects inside a StripeError (a decline's
        PaymentIntent) are rebound from the SDK's global requestor to this guarded one, on the call's account."""
        options: RequestOptions = {**call.options, "max_network_retries": 0}
        options.pop("idempotency_key", None)
        if call.method.lower() == "post":
            options["idempotency_key"] = idempotency_key
        try:
            return super().request(
                call.method, call.url, call.params, options, base_address=call.base_address, usage=call.usage
            )
        except stripe.StripeError as error:
            _rebind(error.error, self._new_requestor_with_options(call.options))
            raise

    def read(
        self, url: str, params: Mapping[str, Any] | None = None, options: RequestOptions | None = None
    ) -> stripe.StripeObject:
        return super().request("get", url, params, options, base_address="api", usage=["stripe_safe"])


def receipt_of(obj: stripe.StripeObject) -> Receipt[stripe.StripeObject] | None:
    """The ledger's receipt behind an object a safe write returned: ``.from_ledger`` says no write was made."""
    receipt = getattr(obj, _RECEIPT_ATTRIBUTE, None)
    return receipt if isinstance(receipt, Receipt) else None


class StripeClient(stripe.StripeClient):
    """``stripe.StripeClient`` whose writes cannot double-charge: each POST or DELETE runs once per intent key."""

    _requestor: _LedgerRequestor

    def __init__(
        self,
        api_key: str,
        *,
        ledger: Ledger,
        tenant: str = DEFAULT_TENANT,
        timeout: float | tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT),
        stripe_account: str | None = None,
        stripe_context: str | None = None,
        stripe_version: str | None = None,
        base_addresses: BaseAddresses | None = None,
        client_id: str | None = None,
        verify_ssl_certs: bool = True,
        proxy: str | None = None,
        max_network_retries: int | None = None,
        http_client: stripe.RequestsClient | None = None,
    ) -> None:
        ledger = check_ledger(ledger, "stripe_safe.StripeClient")
        if http_client is not None and (proxy or verify_ssl_certs is not True):  # as the SDK refuses it
            raise ValueError(
                "You cannot specify `proxy` or `verify_ssl_certs` when passing `http_client`: "
                "configure them on the stripe.RequestsClient instead"
            )
        if http_client is None:
            http_client = stripe.RequestsClient(
                timeout=timeout,
                verify_ssl_certs=verify_ssl_certs,
                proxy=proxy,
                # as stripe.StripeClient's default: async reads go through httpx (or aiohttp) where installed
                async_fallback_client=new_http_client_async_fallback(proxy=proxy, verify_ssl_certs=verify_ssl_certs),
            )
        elif not isinstance(http_client, stripe.RequestsClient):
            raise TypeError("stripe_safe classifies transport errors from requests: pass a stripe.RequestsClient")
        else:  # requests sends a session's headers with every call, over the SDK's own
            session = getattr(http_client, "_session", None)
            _refuse_header(reserved_header(getattr(session, "headers", None) or ()), "the http_client's session")
            _refuse_resending_adapters(session)
        super().__init__(
            api_key,
            stripe_account=stripe_account,
            stripe_context=stripe_context,
            stripe_version=stripe_version,
            base_addresses=base_addresses,
            client_id=client_id,
            # reads only: every write is sent with max_network_retries=0 whatever this says (see send), since an
            # SDK retry would send it again; a read repeated is still a read. None keeps reads unretried too
            max_network_retries=max_network_retries or 0,
            http_client=http_client,
        )
        plain = self._requestor
        self._install(_LedgerRequestor(plain._options, http_client, ledger=ledger, tenant=check_tenant(tenant)))

    def _install(self, requestor: _LedgerRequestor) -> None:
        """Rebuild the service tree on ``requestor`` (the SDK binds services to the requestor at init)."""
        self._requestor = requestor
        self.oauth = OAuthService(requestor, self._options)  # type: ignore[no-untyped-call]  # SDK leaves it untyped
        self.v1 = V1Services(requestor)  # type: ignore[no-untyped-call]
        self.v2 = V2Services(requestor)  # type: ignore[no-untyped-call]

    def _view(self, requestor: _LedgerRequestor) -> StripeClient:
        view = copy.copy(self)
        view._install(requestor)
        return view

    @property
    def ledger(self) -> Ledger:
        return self._requestor.ledger

    @property
    def adapter(self) -> StripeAdapter:
        """The adapter for ``ledger.reconcile(client.adapter, intent_key=...)``."""
        return self._requestor.adapter

    def compensating(self, original_key: IntentKey | str) -> StripeClient:
        """A view whose writes compensate ``original_key`` (e.g. a refund of a charge): linked in the ledger."""
        return self._view(self._requestor.viewed(compensates=IntentKey.parse(original_key)))

    def for_intent(self, intent_key: IntentKey | str) -> StripeClient:
        """A view whose write is ``intent_key``, so ``options`` need no ``idempotency_key``.

        ``client.for_intent("invoice:inv_42:collect:v1").v1.payment_intents.create(params=...)``: the key is
        parsed here, before anything is recorded or sent. An ``idempotency_key`` in ``options`` must then
        name the same intent.
        """
        return self._view(self._requestor.viewed(intent=_header_safe(IntentKey.parse(intent_key))))

    def without_ledger(self, *, reason: str) -> stripe.StripeClient:
        """A plain SDK client (retries still off) for writes the caller has declared safe to repeat."""
        if not reason.strip():
            raise ValueError("without_ledger needs a reason: say why this write is safe to repeat")
        _log.info("stripe_safe: ledger bypassed: %s", reason)
        options = self._requestor._options
        return stripe.StripeClient(
            options.api_key or "",
            stripe_account=options.stripe_account,
            stripe_context=options.stripe_context,
            stripe_version=options.stripe_version,
            base_addresses=options.base_addresses,
            client_id=self._options.client_id,  # OAuth's authorize_url needs it
            max_network_retries=0,
            http_client=self._requestor._client,
        )

    def with_stripe_context(self, stripe_context: str | stripe.StripeContext | None) -> StripeClient:
        """As ``stripe.StripeClient.with_stripe_context``, still guarded: the same key, version and addresses
        with ``stripe_context`` as given (``None`` clears it) and no ``stripe_account``."""
        options = self._requestor._options
        scoped = RequestorOptions(
            api_key=options.api_key,
            stripe_context=stripe_context,
            stripe_version=options.stripe_version,
            base_addresses=options.base_addresses,
            max_network_retries=options.max_network_retries,
        )
        return self._view(self._requestor.rescoped(scoped))

    def raw_request(self, method_: str, url_: str, **params: Any) -> Any:
        _refuse_write(method_, url_, "raw_request")
        return super().raw_request(method_, url_, **params)

    async def raw_request_async(self, method_: str, url_: str, **params: Any) -> Any:
        _refuse_write(method_, url_, "raw_request_async")
        return await super().raw_request_async(method_, url_, **params)
