"""The drop-in surface: SDK construction and ``send``, answers from the ledger, stamping, refusals."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import python_http_client
import sendgrid
from sendgrid.helpers.mail import Mail, MailSettings, SandBoxMode

from safe_effects import (
    EffectRecord,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    IntentConflict,
    IntentNotFound,
    InvalidInput,
    Ledger,
    MissingIntentKey,
)
from sendgrid_safe import INTENT_ARG, RECIPIENTS_ARG, TENANT_ARG, LedgerResponse, SendGridAPIClient
from sendgrid_safe._rules import CUSTOM_ARGS_LIMIT, OPERATION
from sendgrid_safe.testing import FakeSendGrid

Record = Callable[[str], EffectRecord]


def test_send_without_an_intent_key_is_refused_before_anything(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, mail: Any
) -> None:
    def count() -> int:
        return len(ledger.store.list_by_status(list(EffectStatus), provider="sendgrid", limit=10_000))

    before = count()
    with pytest.raises(MissingIntentKey):
        sg.send(mail())
    assert fake.requests() == []
    assert count() == before


def test_a_send_impersonating_a_subuser_is_refused_before_anything(
    make_sg: Callable[..., SendGridAPIClient], fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """SendGrid's Mail Send takes no On-Behalf-Of: the mail would leave from another account than the one the
    lookups search."""
    sg = make_sg(impersonate_subuser="sub1")
    with pytest.raises(InvalidInput, match="subuser's own API key"):
        sg.send(mail(), intent_key=key)
    assert fake.requests() == []
    with pytest.raises(IntentNotFound):
        ledger.get(key)
    assert sg._default_headers["On-Behalf-Of"] == "sub1"  # other endpoints keep impersonating, as the SDK's


def test_a_send_is_the_sdks_response_and_a_repeat_comes_from_the_ledger(
    sg: SendGridAPIClient, fake: FakeSendGrid, record: Record, key: str, mail: Any
) -> None:
    live = sg.send(mail(), intent_key=key)
    assert (live.status_code, live.from_ledger) == (202, False)
    message_id = live.headers["X-Message-Id"]
    again = sg.send(mail(), intent_key=key)
    assert isinstance(again, LedgerResponse)
    assert (again.status_code, again.body, again.to_dict, again.from_ledger) == (202, b"", None, True)
    assert again.headers["x-message-id"] == message_id
    assert fake.effect_count() == 1
    assert record(key).status is EffectStatus.CONFIRMED
    assert record(key).provider_result_id == message_id


def test_a_dict_message_is_the_same_intent_as_its_mail(
    sg: SendGridAPIClient, fake: FakeSendGrid, key: str, mail: Any
) -> None:
    message = mail()
    sg.send(message, intent_key=key)
    assert isinstance(sg.send(message.get(), intent_key=key), LedgerResponse)
    assert fake.effect_count() == 1


def test_intent_and_tenant_travel_as_custom_args_and_the_callers_dict_is_untouched(
    make_sg: Callable[..., SendGridAPIClient], fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    sg = make_sg(tenant="acme")
    body = mail(to=["a@example.com", "b@example.com"]).get()
    body["custom_args"] = {"order": "o_1"}
    before = copy.deepcopy(body)
    sg.send(body, intent_key=key)
    assert body == before
    assert fake.messages[0].custom_args == {
        "order": "o_1",
        INTENT_ARG: key,
        TENANT_ARG: "acme",
        RECIPIENTS_ARG: "2",
    }
    assert ledger.get(key, tenant="acme").status is EffectStatus.CONFIRMED


def test_a_message_carrying_our_custom_args_is_refused(
    sg: SendGridAPIClient, fake: FakeSendGrid, key: str, mail: Any
) -> None:
    body = mail().get()
    body["personalizations"][0]["custom_args"] = {INTENT_ARG: "invoice:other:email:v1"}
    with pytest.raises(InvalidInput):
        sg.send(body, intent_key=key)
    assert fake.requests() == []


@pytest.mark.parametrize("message", ["not a mail", None, b"{}", 42], ids=["str", "None", "bytes", "int"])
def test_a_message_that_is_neither_a_mail_nor_a_dict_is_invalid_input_before_anything(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, message: Any
) -> None:
    with pytest.raises(InvalidInput, match=f"must be a Mail or a dict, got {type(message).__name__}"):
        sg.send(message, intent_key=key)
    assert (fake.requests(), fake.effect_count()) == ([], 0)
    with pytest.raises(IntentNotFound):
        ledger.get(key)


def _oversize(body: dict[str, Any]) -> dict[str, Any]:
    """Custom args that fit SendGrid's 10,000 bytes alone, but not with the wrapper's three."""
    return {**body, "custom_args": {"order": "x" * (CUSTOM_ARGS_LIMIT - 50)}}


@pytest.mark.parametrize(
    "custom_args",
    [
        pytest.param("oversize", id="over 10,000 bytes with ours"),
        pytest.param({"order": "é" * (CUSTOM_ARGS_LIMIT // 2 - 10)}, id="under 10,000 characters, over in bytes"),
        pytest.param(["order"], id="not an object"),
    ],
)
def test_custom_args_the_wrapper_cannot_stamp_are_refused_before_the_ledger_records_anything(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any, custom_args: Any
) -> None:
    body = _oversize(mail().get()) if custom_args == "oversize" else {**mail().get(), "custom_args": custom_args}
    with pytest.raises(InvalidInput, match="custom_args"):
        sg.send(body, intent_key=key)
    assert (fake.requests(), fake.effect_count()) == ([], 0)
    with pytest.raises(IntentNotFound):
        ledger.get(key)


def test_custom_args_of_exactly_10000_bytes_with_ours_are_sent(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """SendGrid's limit is 10,000 bytes, inclusive: a message at it is sent, not refused."""
    ours = {INTENT_ARG: key, TENANT_ARG: "default", RECIPIENTS_ARG: "1"}
    taken = sum(len(k.encode()) + len(v.encode()) for k, v in ours.items()) + len("order")
    body = {**mail().get(), "custom_args": {"order": "x" * (CUSTOM_ARGS_LIMIT - taken)}}
    sg.send(body, intent_key=key)
    stamped = fake.messages[0].custom_args
    assert sum(len(k.encode()) + len(v.encode()) for k, v in stamped.items()) == CUSTOM_ARGS_LIMIT
    assert fake.effect_count() == 1
    assert ledger.get(key).status is EffectStatus.CONFIRMED


def test_more_personalizations_than_sendgrid_takes_are_refused_and_the_split_send_keeps_the_key(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """SendGrid answers 400 to more than 1000 personalizations: inside the ledger that burnt the key."""
    body = mail().get()
    one = body["personalizations"][0]
    with pytest.raises(InvalidInput, match="1001 personalizations; SendGrid takes at most 1000"):
        sg.send({**body, "personalizations": [one] * 1001}, intent_key=key)
    assert (fake.requests(), fake.effect_count()) == ([], 0)
    with pytest.raises(IntentNotFound):
        ledger.get(key)
    raw = sendgrid.SendGridAPIClient(api_key=fake.api_key, host=fake.url)
    with pytest.raises(python_http_client.exceptions.BadRequestsError):  # the fake holds the limit too
        raw.send({**body, "personalizations": [one] * 1001})
    sg.send({**body, "personalizations": [one] * 1000}, intent_key=key)  # at the limit, under the same key
    assert fake.effect_count() == 1
    assert ledger.get(key).status is EffectStatus.CONFIRMED


def test_an_invalid_input_raised_in_dispatch_is_rejected_not_unknown(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """Through the adapter alone (no wrapper check first): stamp() refuses before the POST, so nothing was sent."""
    request = EffectRequest(operation=OPERATION, params=_oversize(mail().get()))
    with pytest.raises(EffectRejected) as rejected:
        ledger.execute(sg.adapter, request, intent_key=key)
    assert isinstance(rejected.value.provider_error, InvalidInput)
    assert (fake.requests(), fake.effect_count()) == ([], 0)
    record = ledger.get(key)
    assert (record.status, record.last_error_class, record.last_error_code) == (
        EffectStatus.REJECTED,
        "InvalidInput",
        "invalid_input",
    )


def test_the_same_key_with_another_message_is_a_conflict(
    sg: SendGridAPIClient, fake: FakeSendGrid, record: Record, key: str, mail: Any
) -> None:
    sg.send(mail(subject="one"), intent_key=key)
    with pytest.raises(IntentConflict):
        sg.send(mail(subject="two"), intent_key=key)
    assert fake.effect_count() == 1
    assert record(key).status is EffectStatus.CONFIRMED


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(lambda client: client.mail.send, id="client.mail.send"),
        pytest.param(lambda client: client._("mail")._("send"), id="client._(mail)._(send)"),
        pytest.param(lambda client: client._("mail/send/"), id="client._(mail/send/)"),
        pytest.param(lambda client: client.version(3).mail.send, id="client.version(3).mail.send"),
    ],
)
def test_a_mail_send_through_sg_client_is_refused_before_anything_is_sent(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, mail: Any, path: Callable[[Any], Any]
) -> None:
    """The SDK's other send shape takes no intent key: through the plain client, three retries were three
    emails and no record. Refused whatever spelling built the path; reads and other endpoints still go."""
    for _retry in range(3):
        with pytest.raises(MissingIntentKey, match=re.escape("Use sg.send(message, intent_key=")):
            path(sg.client).post(request_body=mail().get())
    assert (fake.requests(), fake.effect_count()) == ([], 0)
    assert ledger.store.list_by_status(list(EffectStatus)) == []

    assert sg.client.messages.get(query_params={"limit": 1}).status_code == 200
    with pytest.raises(python_http_client.exceptions.NotFoundError):  # sent: the fake serves no batches
        sg.client.mail.batch.post()
    assert [(r.method, r.path) for r in fake.requests()] == [("GET", "/v3/messages"), ("POST", "/v3/mail/batch")]


def test_sg_client_stays_guarded_when_the_sdk_builds_a_new_one(
    sg: SendGridAPIClient, ledger: Ledger, mail: Any
) -> None:
    """``set_sendgrid_data_residency`` replaces the SDK's client: the new one is guarded at once (the SDK object
    itself, ``sg.adapter.sdk``, could send with it) and keeps the wrapper's timeout."""
    guarded, timeout = type(sg.client), sg.client.timeout
    sg.set_sendgrid_data_residency("eu")
    fresh = sg.adapter.sdk.client
    assert (type(fresh), fresh.host, fresh.timeout) == (guarded, "https://api.eu.sendgrid.com", timeout)
    assert sg.client is fresh
    with pytest.raises(MissingIntentKey):  # refused before any connection to the real host is opened
        sg.client.mail.send.post(request_body=mail().get())
    assert ledger.store.list_by_status(list(EffectStatus)) == []


def test_the_sdk_behind_the_wrapper_is_guarded_from_the_start(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, mail: Any
) -> None:
    """``sg.adapter.sdk`` is the SDK object itself: its ``send`` and its client must not send unguarded, even
    before anyone has read ``sg.client``."""
    with pytest.raises(MissingIntentKey):
        sg.adapter.sdk.send(mail().get())
    with pytest.raises(MissingIntentKey):
        sg.adapter.sdk.client.mail.send.post(request_body=mail().get())
    assert (fake.requests(), fake.effect_count()) == ([], 0)
    assert ledger.store.list_by_status(list(EffectStatus)) == []


def test_sg_client_can_be_stubbed_and_restored_as_on_the_plain_sdk(sg: SendGridAPIClient, fake: FakeSendGrid) -> None:
    own = sg.client
    with mock.patch.object(sg, "client", mock.Mock(name="stub")) as stub:
        assert sg.client is stub
    assert sg.client is own  # restored, and still guarded
    assert sg.client.messages.get(query_params={"limit": 1}).status_code == 200
    assert [(r.method, r.path) for r in fake.requests()] == [("GET", "/v3/messages")]


def test_a_send_goes_through_a_stub_set_on_sg_client_as_the_sdks_own_send_does(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """A unit test that stubs ``sg.client`` must not send real mail: the SDK's send posts through whatever is
    there. The wrapper once built its own client for ``sg.host`` and sent past the stub."""
    with mock.patch.object(sg, "client") as stub:
        stub.mail.send.post.return_value = mock.Mock(status_code=202, body=b"", headers={"X-Message-Id": "stub-1"})
        response = sg.send(mail(), intent_key=key)
    assert response is stub.mail.send.post.return_value
    (call,) = stub.mail.send.post.call_args_list
    assert call.kwargs["request_body"]["custom_args"][INTENT_ARG] == key
    assert (fake.requests(), fake.effect_count()) == ([], 0)
    stored = ledger.get(key)
    assert (stored.status, stored.provider_result_id) == (EffectStatus.CONFIRMED, "stub-1")


def test_a_send_goes_to_the_host_of_a_client_set_on_sg_client(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """An HTTP client set there (another region, a proxy) gets the sends, guarded, with the SDK's API key."""
    with FakeSendGrid() as other:
        sg.client = python_http_client.Client(host=other.url, request_headers={}, version=3)
        sg.send(mail(), intent_key=key)
        with pytest.raises(MissingIntentKey):
            sg.client.mail.send.post(request_body=mail().get())
        (sent,) = other.sends()
        assert sent.header("authorization") == "Bearer SG.fake-key"
        assert (other.effect_count(), fake.effect_count(), fake.requests()) == (1, 0, [])
    assert ledger.get(key).status is EffectStatus.CONFIRMED


@pytest.mark.parametrize("given", ["None", "a store URL", "the store"])
def test_a_ledger_argument_that_is_not_a_ledger_is_refused_when_the_client_is_made(
    fake: FakeSendGrid, ledger: Ledger, store_url: str, given: str
) -> None:
    """``ledger=None`` (an unset setting) once passed construction and failed the first send (AttributeError)."""
    not_a_ledger = {"None": None, "a store URL": store_url, "the store": ledger.store}[given]
    with pytest.raises(
        InvalidInput,
        match=rf"SendGridAPIClient needs ledger=Ledger.open\(store_url\).*, got {type(not_a_ledger).__name__}$",
    ):
        SendGridAPIClient("SG.fake-key", host=fake.url, ledger=not_a_ledger)  # type: ignore[arg-type]
    assert fake.requests() == []
    assert ledger.store.list_by_status(list(EffectStatus)) == []


def test_sdk_attributes_pass_through_with_an_explicit_timeout(sg: SendGridAPIClient, fake: FakeSendGrid) -> None:
    assert sg.host == fake.url
    assert sg.api_key == "SG.fake-key"
    assert sg.client.timeout == 1.0  # the conftest client timeout
    assert callable(sg.reset_request_headers)


def test_per_call_headers_on_the_raw_client_do_not_leak_into_guarded_sends(
    sg: SendGridAPIClient, fake: FakeSendGrid, key: str, mail: Any
) -> None:
    """python-http-client merges request_headers= into the client's stored headers for good."""
    sg.client.messages.get(query_params={"limit": 1}, request_headers={"Content-Type": "text/plain", "X-Leak": "1"})
    assert sg.client.request_headers["X-Leak"] == "1"  # the trap: stored for every later raw call
    sg.send(mail(), intent_key=key)
    sent = fake.sends()[-1]
    assert sent.header("x-leak") is None
    assert sent.header("content-type") == "application/json"
    assert fake.effect_count() == 1


def test_a_send_in_sandbox_mode_is_confirmed_on_sendgrids_200_and_delivers_nothing(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Callable[..., Mail]
) -> None:
    """Sandbox mode is answered 200 without an X-Message-Id: SendGrid's own answer, not a stranger's."""
    message = mail()
    message.mail_settings = MailSettings(sandbox_mode=SandBoxMode(True))
    response = sg.send(message, intent_key=key)
    assert (response.status_code, response.from_ledger) == (200, False)
    recorded = ledger.get(key)
    assert (recorded.status, recorded.provider_result_id) == (EffectStatus.CONFIRMED, None)
    assert (len(fake.sends()), fake.effect_count(), fake.messages) == (1, 0, [])
