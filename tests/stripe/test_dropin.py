"""Drop-in fidelity: what a plain SDK call does, the safe client does too, without a second effect.

Per-call headers that would bypass the ledger, ``expand`` on a ledger answer, confirmed creates whose answer no GET
serves, v2 typed refusals and OAuth refusals: the real SDK over HTTP to FakeStripe, both sides asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest
import requests
import stripe
from requests.adapters import HTTPAdapter
from stripe.oauth_error import InvalidGrantError
from urllib3.util.retry import Retry

from safe_effects import EffectRejected, EffectStatus, EffectUnknown, InvalidInput, UnguardedCall
from safe_effects.testing import Fault
from stripe_safe import AnswerUnavailable, StripeClient, receipt_of
from stripe_safe.testing import server_error_fault, stripe_error_fault

from .conftest import API_KEY, KEY, PI, SHORT_TIMEOUT, Env, raw_client

REPLAY_WINDOW_CLOSED = timedelta(hours=23)  # Stripe's 24 h key window minus the contract's 1 h safety margin
LINK = {"account": "acct_1", "type": "account_onboarding", "refresh_url": "https://x/r", "return_url": "https://x/b"}


def posted_keys(env: Env, path_prefix: str) -> list[str | None]:
    return [p.header("idempotency-key") for p in env.fake.requests("POST", path_prefix)]


# -- 1. per-call headers that would replace the ledger's key or account ---------------------------------------


@pytest.mark.parametrize(
    ("header", "instead"),
    [
        ("Idempotency-Key", "idempotency_key"),
        ("idempotency-key", "idempotency_key"),
        ("Stripe-Account", "stripe_account"),
        ("STRIPE-CONTEXT", "stripe_context"),
    ],
)
@pytest.mark.parametrize("shape", ["dict", "bytes", "pairs"])
def test_a_header_that_would_replace_the_key_or_the_account_is_refused_before_anything_is_recorded(
    env: Env, header: str, instead: str, shape: str
) -> None:
    """The SDK applies ``options["headers"]`` after the Idempotency-Key and account it set: a per-attempt key
    there (a raw-HTTP habit) would make every retry a new charge; an account there would never be recorded.
    However the SDK takes the headers: a dict, bytes names (requests sends them too), or a list of pairs."""
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    headers: object = {
        "dict": {header: "attempt-7f3a"},
        "bytes": {header.encode(): "attempt-7f3a"},
        "pairs": [(f" {header} ", "attempt-7f3a")],
    }[shape]
    options = {"idempotency_key": KEY, "headers": headers}
    for _ in range(2):  # the first call and its retry: both refused, neither sent
        with pytest.raises(InvalidInput, match=rf"{header}.*{instead}.* instead"):
            env.client.v1.payment_intents.create(params=PI, options=options)  # type: ignore[arg-type]
    assert env.fake.requests() == []
    assert env.fake.effect_count("payment_intents.create") == 0
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []


def _async_raw_post(env: Env) -> object:
    return asyncio.run(env.client.raw_request_async("post", "/v1/payment_intents", **PI))


def _raw_post(env: Env) -> object:
    return env.client.raw_request("post", "/v1/payment_intents", **PI)


@pytest.mark.parametrize("call", [_async_raw_post, _raw_post], ids=["raw_request_async", "raw_request"])
def test_a_write_the_ledger_cannot_guard_is_refused_before_anything_is_recorded_or_sent(
    env: Env, call: Callable[[Env], object]
) -> None:
    """The ledger guards the service calls only: a raw POST must fail loudly, typed as the library's other
    refusals (a handler's ``except SafeEffectsError`` sees it), saying what to call instead."""
    with pytest.raises(UnguardedCall, match=r"POST /v1/payment_intents: .*nothing was recorded or sent.*its service"):
        call(env)
    assert env.fake.requests() == []
    assert env.fake.effect_count("payment_intents.create") == 0
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []


def test_async_reads_work_as_on_the_raw_sdk(env: Env) -> None:
    """Like ``stripe.StripeClient``'s default transport, the wrapper's reads ``*_async`` through httpx."""
    created = env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})
    transport = env.client._requestor._client  # the wrapper's default: a RequestsClient with an async fallback
    assert transport is not None

    async def read_then_close() -> stripe.PaymentIntent:
        try:
            return await env.client.v1.payment_intents.retrieve_async(created.id)
        finally:  # httpx's pool belongs to this event loop: closed with it, as any async SDK user must
            await transport.close_async()

    read = asyncio.run(read_then_close())
    assert (read.id, read.amount) == (created.id, PI["amount"])
    assert len(env.fake.requests("GET", f"/v1/payment_intents/{created.id}")) == 1
    assert env.fake.effect_count("payment_intents.create") == 1
    assert env.record().status is EffectStatus.CONFIRMED


def test_max_network_retries_retries_reads_and_never_a_write(env: Env) -> None:
    """``max_network_retries=2``, as a raw SDK user may have it, once refused the client; it now retries reads
    (a read repeated is still a read) while every write goes once, as the ledger needs."""
    client = StripeClient(
        API_KEY, ledger=env.ledger, base_addresses={"api": env.fake.url}, timeout=SHORT_TIMEOUT, max_network_retries=2
    )
    env.fake.inject(server_error_fault(method="POST"))
    with pytest.raises(EffectUnknown):
        client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})
    assert (env.posts(), env.record().status) == (1, EffectStatus.UNKNOWN)  # no SDK retry of the write
    created = client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # the key's replay
    assert env.posts() == 2
    env.fake.inject(server_error_fault(method="GET"))
    assert client.v1.payment_intents.retrieve(created.id).id == created.id
    assert len(env.fake.requests("GET", f"/v1/payment_intents/{created.id}")) == 2  # the 500, then the retry
    assert len(env.fake.payment_intents) == 1


def test_a_preview_invoice_is_a_read_no_key_needed_nothing_recorded(env: Env) -> None:
    """``invoices.create_preview`` is a POST that stores nothing: it once needed an intent key, was recorded as a
    write, and a second preview under that key failed to read back an invoice that does not exist."""
    customer = env.client.v1.customers.create(params={"email": "a@example.com"}, options={"idempotency_key": KEY})
    previews = [env.client.v1.invoices.create_preview(params={"customer": customer.id}) for _ in range(2)]
    assert [p.id for p in previews] == [f"upcoming_in_{customer.id}"] * 2
    assert len(env.fake.requests("POST", "/v1/invoices/create_preview")) == 2
    assert [r.intent_key for r in env.ledger.store.list_by_status(list(EffectStatus))] == [KEY]  # the customer only


@pytest.mark.parametrize("headers", [{"X-Trace-Id": "trace-1"}, [("X-Trace-Id", "trace-1")]])
def test_other_headers_pass_through_under_the_ledgers_key(env: Env, headers: object) -> None:
    options = {"idempotency_key": KEY, "headers": headers}
    created = env.client.v1.payment_intents.create(params=PI, options=options)  # type: ignore[arg-type]
    sent = env.fake.requests("POST", "/v1/payment_intents")
    assert [(p.header("x-trace-id"), p.header("idempotency-key")) for p in sent] == [("trace-1", KEY)]
    assert env.fake.effect_count("payment_intents.create") == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, created.id)


def client_over(env: Env, session: requests.Session) -> StripeClient:
    """A wrapped client whose transport is the caller's own requests session."""
    return StripeClient(
        API_KEY,
        ledger=env.ledger,
        base_addresses={"api": env.fake.url},
        http_client=stripe.RequestsClient(session=session, timeout=SHORT_TIMEOUT),
    )


def test_a_session_header_that_would_replace_the_key_or_the_account_is_refused_when_the_client_is_made(
    env: Env,
) -> None:
    """requests sends a session's headers with every call: an account there would never be recorded."""
    session = requests.Session()
    session.headers["Stripe-Account"] = "acct_X"
    with pytest.raises(InvalidInput, match=r"session sets 'Stripe-Account'.*stripe_account"):
        client_over(env, session)
    assert env.fake.requests() == []


def test_a_session_whose_adapter_would_resend_a_write_is_refused_when_the_client_is_made(env: Env) -> None:
    """A shared session with urllib3 retries mounted (a common set-up) sent a lost DELETE again behind the
    ledger: the resend's 400 made a cancelled subscription (final invoice charged) look rejected."""
    resending = requests.Session()
    resending.mount("http://", HTTPAdapter(max_retries=Retry(total=3)))
    with pytest.raises(InvalidInput, match=r"session's adapter for 'http://' retries .*HTTPAdapter\(max_retries=0\)"):
        client_over(env, resending)
    connecting = requests.Session()  # a connect error is retried before anything is sent: that is allowed
    connecting.mount("http://", HTTPAdapter(max_retries=Retry(total=3, read=0, status=0, other=0)))
    client = client_over(env, connecting)
    env.fake.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})
    assert (env.posts(), env.fake.effect_count("payment_intents.create")) == (1, 1)
    assert env.record().status is EffectStatus.UNKNOWN


@pytest.mark.parametrize("given", ["None", "a store URL", "the store"])
def test_a_ledger_argument_that_is_not_a_ledger_is_refused_when_the_client_is_made(env: Env, given: str) -> None:
    """``ledger=None`` (an unset setting) once passed construction and failed the first write (AttributeError)."""
    ledger = {"None": None, "a store URL": env.store_url, "the store": env.ledger.store}[given]
    with pytest.raises(
        InvalidInput, match=rf"StripeClient needs ledger=Ledger.open\(store_url\).*, got {type(ledger).__name__}$"
    ):
        StripeClient(API_KEY, ledger=ledger, base_addresses={"api": env.fake.url})  # type: ignore[arg-type]
    assert env.fake.requests() == []
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []


def test_a_confirmed_create_whose_object_cannot_be_read_back_is_never_sent_again(env: Env) -> None:
    """The repeat's GET finds nothing (the object was deleted, or the key's access to it was withdrawn). The
    write is confirmed, so the answer is unavailable; a second POST would be a second charge."""
    options = {"idempotency_key": KEY, "api_key": "sk_test_another_account"}
    first = env.client.v1.payment_intents.create(params=PI, options=options)  # type: ignore[arg-type]
    env.fake.inject(
        stripe_error_fault(
            404, "invalid_request_error", f"No such payment_intent: '{first.id}'",
            method="GET", path_prefix=f"/v1/payment_intents/{first.id}",
        )
    )  # fmt: skip
    with pytest.raises(AnswerUnavailable, match="found nothing"):
        env.client.v1.payment_intents.create(params=PI, options=options)  # type: ignore[arg-type]
    assert posted_keys(env, "/v1/payment_intents") == [KEY]
    assert env.fake.effect_count("payment_intents.create") == 1
    record = env.record()
    assert (record.status, record.attempt_count, record.provider_result_id) == (EffectStatus.CONFIRMED, 1, first.id)


# -- 2. the ledger's answer keeps the call's expand ------------------------------------------------------------


def test_a_ledger_answer_reads_the_object_back_with_the_calls_expand(env: Env) -> None:
    params = {**PI, "expand": ["latest_charge"]}
    first = env.client.v1.payment_intents.create(params=params, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    again = env.client.v1.payment_intents.create(params=params, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    assert isinstance(first.latest_charge, stripe.Charge)
    assert isinstance(again.latest_charge, stripe.Charge)  # not a bare id string on the retry
    assert again.latest_charge.id == first.latest_charge.id
    read_back = env.fake.requests("GET", f"/v1/payment_intents/{first.id}")
    assert [dict(r.query) for r in read_back] == [{"expand[0]": ["latest_charge"]}]
    assert env.posts() == 1
    assert env.fake.effect_count("payment_intents.create") == 1
    again_receipt = receipt_of(again)
    assert again_receipt is not None
    assert again_receipt.from_ledger
    assert (env.record().status, env.record().provider_result_id) == (EffectStatus.CONFIRMED, first.id)


# -- 3 and 4. confirmed creates whose answer no GET serves: a same-key replay inside the window -------------------


def test_a_repeated_create_without_an_id_is_answered_by_stripes_replay_of_the_same_key(env: Env) -> None:
    """An AccountLink has no id to GET: the repeat is the same call under the same key, which Stripe answers with
    its saved response and does nothing new."""
    first = env.client.v1.account_links.create(params=LINK, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    again = env.client.v1.account_links.create(params=LINK, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    assert again.url == first.url
    assert posted_keys(env, "/v1/account_links") == [KEY, KEY]
    assert [e.committed for e in env.fake.server.exchanges if e.request.method == "POST"] == [True, False]
    assert env.fake.effect_count("account_links.create") == 1
    record = env.record()
    assert (record.status, record.provider_result_id, record.attempt_count) == (EffectStatus.CONFIRMED, None, 1)
    again_receipt = receipt_of(again)
    assert again_receipt is not None
    assert again_receipt.from_ledger


def test_after_the_key_window_a_create_without_an_id_is_refused_and_nothing_is_sent(env: Env) -> None:
    env.client.v1.account_links.create(params=LINK, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    env.clock.advance(REPLAY_WINDOW_CLOSED)

    with pytest.raises(AnswerUnavailable, match=r"confirmed \(an object without an id\).*key window") as caught:
        env.client.v1.account_links.create(params=LINK, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    assert caught.value.intent_key == KEY
    assert posted_keys(env, "/v1/account_links") == [KEY]
    assert env.fake.effect_count("account_links.create") == 1
    assert env.record().status is EffectStatus.CONFIRMED


def portal_session(env: Env) -> stripe.billing_portal.Session:
    return env.client.v1.billing_portal.sessions.create(
        params={"customer": env.fake.customers[0]["id"], "return_url": "https://x/back"},
        options={"idempotency_key": KEY},
    )


def test_a_repeated_create_with_no_get_endpoint_is_answered_by_stripes_replay_of_the_same_key(env: Env) -> None:
    """A billing portal session has an id, but Stripe serves no GET for it: a same-key replay answers, never a
    call without the intent's key."""
    raw_client(env.fake.url).v1.customers.create(params={"email": "a@example.com"})
    first = portal_session(env)
    again = portal_session(env)

    assert (again.id, again.url) == (first.id, first.url)
    assert env.fake.requests("GET", f"/v1/billing_portal/sessions/{first.id}") == []  # Stripe serves none
    assert posted_keys(env, "/v1/billing_portal") == [KEY, KEY]
    assert env.fake.effect_count("billing_portal.sessions") == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, first.id)


def test_after_the_key_window_a_create_with_no_get_endpoint_is_refused_and_nothing_is_sent(env: Env) -> None:
    raw_client(env.fake.url).v1.customers.create(params={"email": "a@example.com"})
    first = portal_session(env)
    env.clock.advance(REPLAY_WINDOW_CLOSED)

    with pytest.raises(AnswerUnavailable, match=rf"confirmed \(object {first.id}\).*key window"):
        portal_session(env)

    assert posted_keys(env, "/v1/billing_portal") == [KEY]
    assert env.fake.effect_count("billing_portal.sessions") == 1
    assert env.record().status is EffectStatus.CONFIRMED


def test_a_failed_replay_of_a_confirmed_create_is_answer_unavailable(env: Env) -> None:
    """The effect is confirmed; only its answer is missing: a typed error that says so, not the SDK's 500."""
    env.client.v1.account_links.create(params=LINK, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    env.fake.inject(server_error_fault(path_prefix="/v1/account_links"))
    with pytest.raises(AnswerUnavailable, match="replay failed") as caught:
        env.client.v1.account_links.create(params=LINK, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, stripe.APIError)
    assert env.fake.effect_count("account_links.create") == 1
    assert env.record().status is EffectStatus.CONFIRMED


def test_answer_unavailable_names_stripes_error_by_class_code_and_status_never_its_message(env: Env) -> None:
    """Stripe's message can quote the call's params (a return URL carrying an email); the typed error, which
    worker logs keep, names the error class, code and status, and Stripe's error stays its cause."""
    raw_client(env.fake.url).v1.customers.create(params={"email": "a@example.com"})
    portal_session(env)
    quoted = "Not a valid URL: https://shop.example/account?email=jane.doe@example.com"
    env.fake.inject(stripe_error_fault(400, "invalid_request_error", quoted, code="url_invalid"))
    with pytest.raises(AnswerUnavailable) as caught:
        portal_session(env)
    assert "the same-key replay failed (InvalidRequestError: url_invalid, HTTP 400)" in str(caught.value)
    assert "jane.doe" not in str(caught.value)
    assert isinstance(caught.value.__cause__, stripe.InvalidRequestError)
    assert "jane.doe@example.com" in str(caught.value.__cause__)
    assert env.fake.effect_count("billing_portal.sessions") == 1


# -- 5 and 6. v2 typed refusals and OAuth refusals are definitive -------------------------------------------------


def test_a_v2_typed_refusal_is_rejected_not_unknown(env: Env) -> None:
    """The SDK raises v2's own classes (here InsufficientFundsError) for a v2 400: a refusal, nothing done."""
    path = "/v2/money_management/outbound_payments"
    env.fake.inject(stripe_error_fault(400, "insufficient_funds", "Insufficient funds.", path_prefix=path))
    params = {
        "from": {"financial_account": "fa_1", "currency": "usd"},
        "to": {"recipient": "acct_9"},
        "amount": {"value": 100, "currency": "usd"},
    }
    with pytest.raises(EffectRejected) as caught:
        env.client.v2.money_management.outbound_payments.create(params=params, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    assert isinstance(caught.value.provider_error, stripe.InsufficientFundsError)
    with pytest.raises(EffectRejected):  # the retry is answered from the ledger
        env.client.v2.money_management.outbound_payments.create(params=params, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    assert posted_keys(env, path) == [KEY]
    assert not any(e.committed for e in env.fake.server.exchanges)
    record = env.record()
    assert (record.status, record.last_error_class) == (EffectStatus.REJECTED, "InsufficientFundsError")


def test_an_oauth_refusal_is_rejected_not_unknown(env: Env) -> None:
    """``client.oauth.token`` is a write through the ledger; an ``invalid_grant`` (a used or unknown code) is a
    refusal: nothing was connected."""
    client = StripeClient(
        API_KEY, ledger=env.ledger, base_addresses={"api": env.fake.url, "connect": env.fake.url}, timeout=SHORT_TIMEOUT
    )
    body = {"error": "invalid_grant", "error_description": "Authorization code does not exist: ac_x"}
    env.fake.inject(Fault.status_code(400, body=body, path_prefix="/oauth/token"))
    key = "connect:ac_x:oauth_token:v1"

    with pytest.raises(EffectRejected) as caught:
        client.oauth.token(
            params={"grant_type": "authorization_code", "code": "ac_x"}, options={"idempotency_key": key}
        )

    assert isinstance(caught.value.provider_error, InvalidGrantError)
    assert posted_keys(env, "/oauth/") == [key]
    assert not any(e.committed for e in env.fake.server.exchanges)
    record = env.record(key)
    assert (record.status, record.last_error_code) == (EffectStatus.REJECTED, "invalid_grant")


def test_a_repeated_oauth_token_is_answered_by_stripes_replay_of_the_same_key(env: Env) -> None:
    """A token answer has no id to GET, and moves no money: the repeat is Stripe's replay of the same key."""
    client = StripeClient(
        API_KEY, ledger=env.ledger, base_addresses={"api": env.fake.url, "connect": env.fake.url}, timeout=SHORT_TIMEOUT
    )
    token = {"access_token": "sk_test_connected", "token_type": "bearer", "stripe_user_id": "acct_1X"}
    env.fake.inject(Fault.status_code(200, body=token, path_prefix="/oauth/token"))
    env.fake.inject(
        Fault.status_code(200, body=token, headers={"Idempotent-Replayed": "true"}, path_prefix="/oauth/token")
    )
    key = "connect:ac_1:oauth_token:v1"
    params = {"grant_type": "authorization_code", "code": "ac_1"}

    first = client.oauth.token(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]
    again = client.oauth.token(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]

    assert again.stripe_user_id == first.stripe_user_id == "acct_1X"
    assert posted_keys(env, "/oauth/token") == [key, key]
    receipt = receipt_of(again)
    assert receipt is not None
    assert receipt.from_ledger
    assert (env.record(key).status, env.record(key).attempt_count) == (EffectStatus.CONFIRMED, 1)


def test_a_repeated_action_that_made_another_object_reads_that_object_back(env: Env) -> None:
    """A payout's reversal is a new payout: the repeat GETs /v1/payouts/<new id> (after the action's own path
    found nothing), and never posts the reversal again."""
    reversal = {"id": "po_2B", "object": "payout", "amount": 1100, "currency": "eur", "status": "pending"}
    env.fake.inject(Fault.status_code(200, body=reversal, method="POST", path_prefix="/v1/payouts/po_1A/reverse"))
    env.fake.inject(Fault.status_code(200, body=reversal, method="GET", path_prefix="/v1/payouts/po_2B"))
    key = "payout:po_1A:reverse:v1"

    first = env.client.v1.payouts.reverse("po_1A", options={"idempotency_key": key})
    again = env.client.v1.payouts.reverse("po_1A", options={"idempotency_key": key})

    assert again.id == first.id == "po_2B"
    assert [r.path for r in env.fake.requests("GET", "/v1/payouts")] == [
        "/v1/payouts/po_1A/reverse/po_2B", "/v1/payouts/po_2B",
    ]  # fmt: skip
    assert len(env.fake.requests("POST", "/v1/payouts")) == 1
    assert (env.record(key).status, env.record(key).provider_result_id) == (EffectStatus.CONFIRMED, "po_2B")
