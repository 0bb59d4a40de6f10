"""The drop-in clients: what they refuse before sending, what they put on the wire, what they answer."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import boto3
import botocore.session
import pytest
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import CredentialRetrievalError, ParamValidationError, UnknownServiceError
from botocore.stub import ANY, Stubber

import ses_safe
from safe_effects import (
    EffectDeferred,
    EffectRejected,
    EffectStatus,
    IntentConflict,
    IntentNotFound,
    InvalidInput,
    Ledger,
    LookupStatus,
    MissingIntentKey,
    Operator,
    UnguardedCall,
)
from ses_safe import INTENT_TAG, TENANT_TAG, MissingConfigurationSet, ReservedTagName
from ses_safe.testing import MotoFaultProxy, moto_sent_messages

KEY = "signup:u_1:welcome:v1"
RAW = b"From: sender@example.com\r\nTo: customer@example.com\r\nSubject: Hi\r\n\r\nWelcome.\r\n"
TEMPLATED = {
    "Source": "sender@example.com",
    "Destination": {"ToAddresses": ["customer@example.com"]},
    "Template": "welcome",
    "TemplateData": json.dumps({"name": "Ada"}),
}


def test_a_send_without_intent_key_raises_before_anything_is_sent(
    ses: Any, sesv2: Any, proxy: MotoFaultProxy, v1_email: dict[str, Any], v2_email: dict[str, Any]
) -> None:
    with pytest.raises(MissingIntentKey):
        sesv2.send_email(**v2_email)
    with pytest.raises(MissingIntentKey):
        ses.send_email(**v1_email)
    with pytest.raises(MissingIntentKey):
        ses.send_raw_email(RawMessage={"Data": RAW})
    assert proxy.exchanges == []


def test_a_send_without_configuration_set_raises_before_anything_is_sent(
    wrapped: Any, proxy: MotoFaultProxy, ledger: Ledger, v2_email: dict[str, Any]
) -> None:
    with pytest.raises(MissingConfigurationSet):
        wrapped("sesv2", configuration_set=None).send_email(IntentKey=KEY, **v2_email)
    assert proxy.exchanges == []


def test_v2_send_puts_intent_tenant_and_configuration_set_on_the_wire(
    wrapped: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger, v2_email: dict[str, Any]
) -> None:
    email = {**v2_email, "EmailTags": [{"Name": "campaign", "Value": "welcome"}]}
    answer = wrapped("sesv2", tenant="acme.eu").send_email(IntentKey=KEY, **email)

    body = json.loads(proxy.sends()[0].body)
    assert body["ConfigurationSetName"] == "safe-effects"
    assert body["EmailTags"] == [
        {"Name": "campaign", "Value": "welcome"},
        {"Name": INTENT_TAG, "Value": "signup-u_5f1-welcome-v1"},
        {"Name": TENANT_TAG, "Value": "acme_2eeu"},
    ]
    [sent] = moto_sent_messages(moto)
    assert answer["MessageId"] == sent["id"]
    assert answer["SafeEffects"] == {"FromLedger": False, "IntentKey": KEY, "Tenant": "acme.eu", "Status": "confirmed"}
    record = ledger.get(KEY, tenant="acme.eu")
    assert record.provider_key == "signup-u_5f1-welcome-v1"
    assert ledger.store.find_by_provider_key("ses", "signup-u_5f1-welcome-v1") == [record]


def test_v1_send_email_tags_go_on_the_wire_and_the_callers_configuration_set_wins(
    ses: Any, proxy: MotoFaultProxy, moto: str, v1_email: dict[str, Any]
) -> None:
    ses.send_email(IntentKey=KEY, ConfigurationSetName="transactional", **v1_email)
    form = parse_qs(proxy.sends()[0].body.decode())
    assert form["Action"] == ["SendEmail"]
    assert form["ConfigurationSetName"] == ["transactional"]
    assert form["Tags.member.1.Name"] == [INTENT_TAG]
    assert form["Tags.member.2.Value"] == ["default"]
    assert len(moto_sent_messages(moto)) == 1


def test_v1_send_raw_email_goes_through_the_ledger_once(
    ses: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger
) -> None:
    first = ses.send_raw_email(IntentKey=KEY, RawMessage={"Data": RAW})
    again = ses.send_raw_email(IntentKey=KEY, RawMessage={"Data": RAW})
    assert again["MessageId"] == first["MessageId"]
    assert again["SafeEffects"]["FromLedger"] is True
    assert len(moto_sent_messages(moto)) == 1
    assert len(proxy.sends()) == 1
    assert ledger.get(KEY).operation == "ses.send_raw_email"


def test_same_key_other_message_is_a_conflict_and_is_not_sent(
    sesv2: Any, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any]
) -> None:
    sesv2.send_email(IntentKey=KEY, **v2_email)
    other = {**v2_email, "Destination": {"ToAddresses": ["someone-else@example.com"]}}
    with pytest.raises(IntentConflict):
        sesv2.send_email(IntentKey=KEY, **other)
    assert len(moto_sent_messages(moto)) == 1
    assert len(proxy.sends()) == 1


def test_a_caller_tag_named_like_ours_is_refused_before_sending(
    sesv2: Any, proxy: MotoFaultProxy, ledger: Ledger, v2_email: dict[str, Any]
) -> None:
    email = {**v2_email, "EmailTags": [{"Name": INTENT_TAG, "Value": "forged"}]}
    with pytest.raises(ReservedTagName):
        sesv2.send_email(IntentKey=KEY, **email)
    assert proxy.sends() == []
    with pytest.raises(IntentNotFound):
        ledger.get(KEY)


def test_other_methods_pass_through_to_boto3(ses: Any, sesv2: Any, proxy: MotoFaultProxy) -> None:
    assert "sender@example.com" in ses.list_identities()["Identities"]
    assert sesv2.meta.service_model.service_name == "sesv2"
    assert not hasattr(sesv2, "send_raw_email")


def test_lookup_asks_message_insights_only_when_a_message_id_is_known(
    sesv2: Any, ledger: Ledger, v2_email: dict[str, Any]
) -> None:
    sesv2.send_email(IntentKey=KEY, **v2_email)
    with_id = ledger.get(KEY).model_copy(update={"status": EffectStatus.UNKNOWN})
    without_id = with_id.model_copy(update={"provider_result_id": None})

    assert sesv2.adapter.lookup(without_id).status is LookupStatus.INCONCLUSIVE
    assert sesv2.adapter.lookup(with_id).status is LookupStatus.INCONCLUSIVE  # moto has no message insights
    seen: list[str] = []
    stub = ses_safe.SesAdapter(sesv2.adapter.client, insights=lambda mid: seen.append(mid) or {"Insights": []})
    found = stub.lookup(with_id)
    assert found.status is LookupStatus.FOUND
    assert found.provider_result_id == with_id.provider_result_id
    assert seen == [with_id.provider_result_id]


def test_v1_send_templated_email_goes_through_the_ledger_once(
    ses: Any, raw_client: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger
) -> None:
    raw_client("ses").create_template(
        Template={"TemplateName": "welcome", "SubjectPart": "Hi {{name}}", "TextPart": "Welcome, {{name}}."}
    )
    first = ses.send_templated_email(IntentKey=KEY, **TEMPLATED)
    again = ses.send_templated_email(IntentKey=KEY, **TEMPLATED)

    assert again["MessageId"] == first["MessageId"]
    assert again["SafeEffects"]["FromLedger"] is True
    form = parse_qs(proxy.sends()[0].body.decode())
    assert form["Action"] == ["SendTemplatedEmail"]
    assert form["Tags.member.1.Name"] == [INTENT_TAG]
    assert len(proxy.sends()) == 1
    assert len(moto_sent_messages(moto)) == 1
    assert ledger.get(KEY).operation == "ses.send_templated_email"


def _misspelt(email: dict[str, Any]) -> None:
    email["FromEmailAdress"] = email.pop("FromEmailAddress")


def _int_body(email: dict[str, Any]) -> None:
    email["Content"]["Simple"]["Body"]["Text"]["Data"] = 2599


Slip = Callable[[dict[str, Any]], None]


class Stream:
    """A file-like message body, which botocore takes for a blob and no copy can take (an open file's kind)."""

    def read(self, size: int = -1) -> bytes:
        return RAW

    def __deepcopy__(self, memo: object) -> Stream:
        raise TypeError("cannot pickle 'Stream' object")


def _streamed_to_a_str(email: dict[str, Any]) -> None:
    email.update(RawMessage={"Data": Stream()}, Destinations="customer@example.com")


@pytest.mark.parametrize(
    ("service", "method", "slip", "problem"),
    [
        ("sesv2", "send_email", _misspelt, 'Unknown parameter in input: "FromEmailAdress"'),
        ("sesv2", "send_email", _int_body, "Invalid type for parameter Content.Simple.Body.Text.Data: got int"),
        (
            "sesv2",
            "send_email",
            lambda email: email.update(Content="Thanks."),
            "Invalid type for parameter Content: got str, valid types: dict",
        ),
        (
            "ses",
            "send_email",
            lambda email: email["Message"].pop("Body"),
            'Missing required parameter in Message: "Body"',
        ),
        ("ses", "send_raw_email", lambda email: email.update(RawMessage={"Bytes": RAW}), 'in RawMessage: "Bytes"'),
        ("ses", "send_raw_email", _streamed_to_a_str, "Invalid type for parameter Destinations"),
        (
            "ses",
            "send_templated_email",
            lambda email: email.update(TemplateData={}),
            "parameter TemplateData: got dict, valid types: str",
        ),
    ],
)
def test_a_call_botocore_refuses_client_side_is_invalid_input_and_the_fixed_call_keeps_the_key(
    env: Any,
    raw_client: Any,
    ledger: Ledger,
    emails: dict[str, Any],
    service: str,
    method: str,
    slip: Slip,
    problem: str,
) -> None:
    """botocore refuses these before any request; met inside the ledger they once burnt the intent as rejected
    (a saga then compensated a send that never went, and the fixed call met IntentConflict)."""
    raw_client("ses").create_template(
        Template={"TemplateName": "welcome", "SubjectPart": "Hi {{name}}", "TextPart": "Welcome, {{name}}."}
    )
    good = {"send_raw_email": {"RawMessage": {"Data": RAW}}, "send_templated_email": TEMPLATED}.get(
        method, emails[service]
    )
    bad = copy.deepcopy(good)
    slip(bad)
    client = getattr(env, service)
    with pytest.raises(
        InvalidInput, match=rf"(?s){service}\.{method}: Parameter validation failed:.*{re.escape(problem)}"
    ):
        getattr(client, method)(IntentKey=KEY, **bad)
    assert env.proxy.exchanges == []
    with pytest.raises(IntentNotFound):
        ledger.get(KEY)

    answer = getattr(client, method)(IntentKey=KEY, **good)  # the fixed call, under the same key
    [sent] = env.sent()
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert ledger.get(KEY).provider_result_id == answer["MessageId"] == sent["id"]


@pytest.mark.parametrize(
    ("service", "method", "spread", "fits"),
    [
        (
            "sesv2",
            "send_email",
            lambda email, to: email["Destination"].update(ToAddresses=to[:30], BccAddresses=to[30:]),
            50,
        ),
        (
            "ses",
            "send_email",
            lambda email, to: email["Destination"].update(ToAddresses=to[:1], CcAddresses=to[1:]),
            50,
        ),
        # moto counts the raw message's own To: header beside Destinations
        ("ses", "send_raw_email", lambda email, to: email.update(Destinations=to), 49),
    ],
)
def test_more_recipients_than_ses_takes_are_refused_and_the_split_send_keeps_the_key(
    env: Any, ledger: Ledger, emails: dict[str, Any], service: str, method: str, spread: Any, fits: int
) -> None:
    """SES refuses a message to more than 50 recipients (MessageRejected): inside the ledger that burnt the key."""
    good = {"send_raw_email": {"RawMessage": {"Data": RAW}}}.get(method, emails[service])
    bad = copy.deepcopy(good)
    spread(bad, [f"r{n}@example.com" for n in range(51)])
    client = getattr(env, service)
    with pytest.raises(InvalidInput, match=rf"{service}\.{method}: 51 recipients; SES takes at most 50 per message"):
        getattr(client, method)(IntentKey=KEY, **bad)
    assert env.proxy.exchanges == []
    with pytest.raises(IntentNotFound):
        ledger.get(KEY)
    fewer = copy.deepcopy(good)
    spread(fewer, [f"r{n}@example.com" for n in range(fits)])
    getattr(client, method)(IntentKey=KEY, **fewer)  # under the same key
    assert len(env.sent()) == 1
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED


_ADDRESS = "jane.doe@example.com"
_BODY = "Dear Jane, your test result is ready"


@pytest.mark.parametrize(
    ("slip", "problem"),
    [
        (
            lambda email: email["Content"]["Simple"]["Body"].update(Text=_BODY),
            "Invalid type for parameter Content.Simple.Body.Text: got str, valid types: dict",
        ),
        (
            lambda email: email["Destination"].update(ToAddresses=_ADDRESS),
            "Invalid type for parameter Destination.ToAddresses: got str, valid types: list, tuple",
        ),
    ],
)
def test_invalid_input_names_the_parameter_and_never_quotes_its_value(
    env: Any, ledger: Ledger, v2_email: dict[str, Any], slip: Slip, problem: str
) -> None:
    """botocore's report quotes the value (a recipient, a message body) and job runners log an error's text:
    the typed error says where and what was wrong; botocore's own error, values and all, is its cause."""
    bad = copy.deepcopy(v2_email)
    slip(bad)
    with pytest.raises(InvalidInput, match=re.escape(problem)) as refused:
        env.sesv2.send_email(IntentKey=KEY, **bad)
    assert _ADDRESS not in str(refused.value)
    assert _BODY not in str(refused.value)
    assert isinstance(refused.value.__cause__, ParamValidationError)
    assert _ADDRESS in str(refused.value.__cause__) or _BODY in str(refused.value.__cause__)
    assert env.proxy.exchanges == []


@pytest.mark.parametrize(
    ("service", "method"),
    [
        ("ses", "send_bulk_templated_email"),
        ("ses", "send_custom_verification_email"),
        ("ses", "send_bounce"),
        ("sesv2", "send_bulk_email"),
        ("sesv2", "send_custom_verification_email"),
    ],
)
def test_sends_the_ledger_cannot_guard_are_refused_not_passed_through(
    env: Any, proxy: MotoFaultProxy, ledger: Ledger, service: str, method: str
) -> None:
    client = env.sesv2 if service == "sesv2" else env.ses
    with pytest.raises(UnguardedCall, match=rf"{service}\.{method} is not guarded by the ledger"):
        getattr(client, method)(Destination={"ToAddresses": ["customer@example.com"]})
    assert proxy.exchanges == []
    assert ledger.store.list_by_status(list(EffectStatus)) == []


def test_without_ledger_needs_a_reason_and_is_the_plain_boto3_client(
    sesv2: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger, v2_email: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        sesv2.without_ledger(reason=" ")
    plain = sesv2.without_ledger(reason="a test of the escape hatch")
    plain.send_email(**v2_email)
    assert "SafeEffects" not in plain.send_email(**v2_email)
    assert len(moto_sent_messages(moto)) == 2
    assert ledger.store.list_by_status(list(EffectStatus)) == []


def test_a_stubber_on_the_wrapped_client_answers_the_guarded_sends(
    sesv2: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger, v2_email: dict[str, Any]
) -> None:
    """botocore's Stubber registers on client.meta.events: the wrapper's meta is the sending client's."""
    on_the_wire = {**v2_email, "ConfigurationSetName": "safe-effects", "EmailTags": ANY}
    with Stubber(sesv2) as stub:
        stub.add_response("send_email", {"MessageId": "stubbed-1"}, expected_params=on_the_wire)
        stub.add_client_error("send_email", "MessageRejected", http_status_code=400)
        answer = sesv2.send_email(IntentKey=KEY, **v2_email)
        again = sesv2.send_email(IntentKey=KEY, **v2_email)  # the ledger answers: no stubbed answer consumed
        with pytest.raises(EffectRejected):
            sesv2.send_email(IntentKey="signup:u_2:welcome:v1", **v2_email)
        stub.assert_no_pending_responses()

    assert (answer["MessageId"], again["SafeEffects"]["FromLedger"]) == ("stubbed-1", True)
    assert proxy.exchanges == []
    assert moto_sent_messages(moto) == []
    record = ledger.get(KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, "stubbed-1")
    rejected = ledger.get("signup:u_2:welcome:v1")
    assert (rejected.status, rejected.last_error_code) == (EffectStatus.REJECTED, "MessageRejected")


def test_hooks_registered_on_the_wrapped_clients_meta_events_see_the_guarded_send(
    ses: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger, v1_email: dict[str, Any]
) -> None:
    seen: list[tuple[str, Any]] = []
    ses.meta.events.register("provide-client-params.ses.SendEmail", lambda params, **_: seen.append(("params", params)))
    ses.meta.events.register("before-send.ses.SendEmail", lambda request, **_: seen.append(("send", request.url)))
    answer = ses.send_email(IntentKey=KEY, **v1_email)

    [(_, params), send] = seen
    assert params["Tags"][0] == {"Name": INTENT_TAG, "Value": "signup-u_5f1-welcome-v1"}
    assert send == ("send", proxy.url + "/")
    assert len(proxy.sends()) == 1
    [sent] = moto_sent_messages(moto)
    assert ledger.get(KEY).provider_result_id == answer["MessageId"] == sent["id"]


def test_a_call_the_clients_parameter_hooks_make_valid_is_sent(
    ses: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger, v1_email: dict[str, Any]
) -> None:
    """boto3's way to take a custom keyword off or fill in a default: botocore validates after these hooks, and
    so must the wrapper's own check, or it refuses a call botocore would send."""
    traced: list[object] = []

    def default_sender(params: dict[str, Any], **_: Any) -> None:
        params.setdefault("Source", v1_email["Source"])

    def take_trace_id(params: dict[str, Any], **_: Any) -> None:
        traced.append(params.pop("TraceId", None))

    ses.meta.events.register("provide-client-params.ses.SendEmail", default_sender)
    ses.meta.events.register("provide-client-params.ses.SendEmail", take_trace_id)
    without_source = {key: value for key, value in v1_email.items() if key != "Source"}

    answer = ses.send_email(IntentKey=KEY, TraceId="t-1", **without_source)

    [sent] = moto_sent_messages(moto)
    assert ledger.get(KEY).provider_result_id == answer["MessageId"] == sent["id"]
    assert sent["source"] == v1_email["Source"]
    assert traced[-1] == "t-1"  # the real send's hooks ran too
    assert len(proxy.sends()) == 1


@pytest.mark.parametrize("name", ["SES", "SESv2", "ses-v2", "email"])
def test_a_service_name_boto3_does_not_know_is_refused_before_anything(
    wrapped: Any, raw_client: Any, proxy: MotoFaultProxy, ledger: Ledger, name: str
) -> None:
    """Any name but "ses" once built a SESv2 client: a v1 send then failed validation and burnt its intent."""
    with pytest.raises(UnknownServiceError):
        raw_client(name)  # the plain SDK refuses the same name
    with pytest.raises(InvalidInput, match=rf"wraps 'ses' or 'sesv2', got '{name}'"):
        wrapped(name)
    assert proxy.exchanges == []
    assert ledger.store.list_by_status(list(EffectStatus)) == []


@pytest.mark.parametrize("service", ["ses", "sesv2"])
@pytest.mark.parametrize("given", ["None", "a store URL", "the store"])
def test_a_ledger_argument_that_is_not_a_ledger_is_refused_when_the_client_is_made(
    proxy: MotoFaultProxy, ledger: Ledger, store_url: str, service: str, given: str
) -> None:
    """``ledger=None`` (an unset setting) once passed construction and failed the first send (AttributeError)."""
    not_a_ledger = {"None": None, "a store URL": store_url, "the store": ledger.store}[given]
    with pytest.raises(
        InvalidInput,
        match=rf"ses_safe.client needs ledger=Ledger.open\(store_url\).*, got {type(not_a_ledger).__name__}$",
    ):
        ses_safe.client(service, ledger=not_a_ledger, endpoint_url=proxy.url)  # type: ignore[call-overload]
    made_directly = {"ses": ses_safe.SafeSESClient, "sesv2": ses_safe.SafeSESv2Client}[service]
    wrapped = ses_safe.client(service, "us-east-1", ledger=ledger, endpoint_url=proxy.url, configuration_set="c")
    with pytest.raises(InvalidInput, match=rf"ses_safe.{made_directly.__name__} needs ledger="):
        made_directly(raw=None, adapter=wrapped.adapter, ledger=not_a_ledger, tenant="default", configuration_set="c")
    assert proxy.exchanges == []
    assert ledger.store.list_by_status(list(EffectStatus)) == []


@pytest.mark.parametrize("service", ["ses", "sesv2"])
def test_region_name_is_the_second_positional_argument_like_boto3(
    proxy: MotoFaultProxy, moto: str, ledger: Ledger, boto_session: Any, emails: dict[str, Any], service: str
) -> None:
    options = {"endpoint_url": proxy.url, "session": boto_session, "configuration_set": "safe-effects"}
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    client = ses_safe.client(service, "us-east-1", ledger=ledger, **options, **credentials)  # type: ignore[call-overload]
    answer = client.send_email(IntentKey=KEY, **emails[service])
    assert client.meta.region_name == client.without_ledger(reason="a region check").meta.region_name == "us-east-1"
    [sent] = moto_sent_messages(moto)
    assert ledger.get(KEY).provider_result_id == answer["MessageId"] == sent["id"]


@pytest.mark.parametrize("service", ["ses", "sesv2"])
def test_without_a_session_the_client_is_made_from_boto3s_default_session_like_boto3_client(
    proxy: MotoFaultProxy, moto: str, ledger: Ledger, emails: dict[str, Any], service: str, no_aws_credentials: None
) -> None:
    """``boto3.setup_default_session(...)`` configures ``boto3.client``: its region, credentials and hooks are the
    wrapped client's too. A fresh session of the wrapper's own once left it without a region (NoRegionError)
    or credentials (the send deferred)."""
    boto3.setup_default_session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    signed: list[str] = []
    boto3.DEFAULT_SESSION.events.register("before-send", lambda request, **_: signed.append(request.method))  # type: ignore[union-attr]
    client = ses_safe.client(service, ledger=ledger, endpoint_url=proxy.url, configuration_set="cs")  # type: ignore[call-overload]
    assert client.meta.region_name == boto3.client(service).meta.region_name == "us-east-1"  # none in the env
    answer = client.send_email(IntentKey=KEY, **emails[service])
    [sent] = moto_sent_messages(moto)
    assert ledger.get(KEY).provider_result_id == answer["MessageId"] == sent["id"]
    assert signed == ["POST"]


def test_an_operator_compensation_the_adapter_cannot_send_is_refused_before_anything_is_recorded(
    sesv2: Any, ledger: Ledger, raw_client: Any, moto: str, v2_email: dict[str, Any]
) -> None:
    """``safe-effects compensate`` passes params only, which SesAdapter cannot send: refused with nothing
    recorded, so neither the compensation's key nor the original is held by a rejection that never sent."""
    sesv2.send_email(IntentKey=KEY, **v2_email)
    original = ledger.get(KEY)
    adapter, operator = ses_safe.SesAdapter(raw_client("sesv2")), Operator(ledger)
    for operation, refusal in (("sesv2.send_email", r"SendPayload.*nothing was recorded"), ("send", "no operation")):
        with pytest.raises(InvalidInput, match=refusal):
            operator.compensate(
                adapter, original_key=KEY, compensating_key="signup:u_1:apology:v1", operation=operation,
                params={"FromEmailAddress": v2_email["FromEmailAddress"]}, operator="alice", reason="wrong text",
                expect_version=original.version,
            )  # fmt: skip
    with pytest.raises(IntentNotFound):
        ledger.get("signup:u_1:apology:v1")
    assert ledger.get(KEY) == original
    assert len(moto_sent_messages(moto)) == 1


def test_a_send_without_credentials_is_deferred_and_goes_once_they_are_there(
    ledger: Ledger, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any], no_aws_credentials: None
) -> None:
    """A worker deployed without AWS credentials: boto3 signs nothing and sends nothing. The intent waits
    (EffectDeferred, prepared again); rejected, this receipt could never be sent under its key."""
    options = {"ledger": ledger, "region_name": "us-east-1", "endpoint_url": proxy.url, "configuration_set": "cs"}
    bare = ses_safe.client("sesv2", session=boto3.session.Session(), **options)  # type: ignore[call-overload]
    with pytest.raises(EffectDeferred) as deferred:
        bare.send_email(IntentKey=KEY, **v2_email)
    assert deferred.value.retry_after == 60.0
    assert ledger.get(KEY).status is EffectStatus.PREPARED
    assert moto_sent_messages(moto) == []
    keyed = ses_safe.client(  # type: ignore[call-overload]
        "sesv2", aws_access_key_id="testing", aws_secret_access_key="testing", **options
    )
    keyed.send_email(IntentKey=KEY, **v2_email)
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert len(moto_sent_messages(moto)) == 1


def test_a_v1_address_ses_refuses_is_rejected_not_left_unknown(
    ses: Any, proxy: MotoFaultProxy, moto: str, ledger: Ledger, v1_email: dict[str, Any]
) -> None:
    """v1 answers an address without a domain with InvalidParameterValue (400): SES sent nothing, and no event
    will ever come to settle the intent, so it ends rejected rather than waiting for an operator."""
    bad = {**v1_email, "Destination": {"ToAddresses": ["not-an-address"]}}
    with pytest.raises(EffectRejected):
        ses.send_email(IntentKey=KEY, **bad)
    record = ledger.get(KEY)
    assert (record.status, record.last_error_code) == (EffectStatus.REJECTED, "InvalidParameterValue")
    assert len(proxy.sends()) == 1
    assert moto_sent_messages(moto) == []


def test_credentials_that_fail_to_refresh_defer_the_send(
    ledger: Ledger, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any]
) -> None:
    """An instance-metadata or container endpoint timing out while boto3 refreshes credentials: nothing was
    signed, nothing sent, and the intent waits (prepared) instead of going unknown."""

    def refresh() -> dict[str, str]:
        raise CredentialRetrievalError(provider="container-role", error_msg="metadata endpoint timed out")

    botocore_session = botocore.session.get_session()
    expired = datetime.now(UTC) - timedelta(minutes=1)
    botocore_session._credentials = RefreshableCredentials("a", "b", None, expired, refresh, "container-role")
    client = ses_safe.client(  # type: ignore[call-overload]
        "sesv2", ledger=ledger, region_name="us-east-1", endpoint_url=proxy.url, configuration_set="cs",
        session=boto3.session.Session(botocore_session=botocore_session),
    )  # fmt: skip
    with pytest.raises(EffectDeferred) as deferred:
        client.send_email(IntentKey=KEY, **v2_email)
    assert deferred.value.retry_after == 60.0
    assert ledger.get(KEY).status is EffectStatus.PREPARED
    assert proxy.exchanges == []
    assert moto_sent_messages(moto) == []
