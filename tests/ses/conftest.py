"""SES fixtures: one moto server per session (reset per test), a fault proxy and an SQS event queue per test."""

from __future__ import annotations

import functools
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

import ses_safe
from safe_effects import EffectUnknown, IntentKey, Ledger, RetryPolicy
from safe_effects.testing import Fault
from ses_safe import intent_tag, tenant_tag
from ses_safe.testing import MotoFaultProxy, intent_tags, moto_sent_messages, moto_server, reset_moto

REGION = "us-east-1"
SENDER = "sender@example.com"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
FAST_RETRY = RetryPolicy(initial_wait=0.0, max_wait=0.0)
Factory = Callable[..., Any]
LoseASend = Callable[[str], tuple[str, dict[str, str]]]


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def raw_client(moto_url: str, boto_session: boto3.session.Session) -> Factory:
    """Plain boto3 clients straight at moto (set-up and assertions, never through the ledger)."""

    def make(
        service: str, endpoint: str = moto_url, *, session: boto3.session.Session = boto_session, **kwargs: Any
    ) -> Any:
        return session.client(service, region_name=REGION, endpoint_url=endpoint, **CREDENTIALS, **kwargs)

    return make


@pytest.fixture
def moto(moto_url: str, raw_client: Factory) -> str:
    """The moto server, emptied, with the test sender verified (moto rejects unverified senders)."""
    reset_moto(moto_url)
    raw_client("ses").verify_email_identity(EmailAddress=SENDER)
    return moto_url


@pytest.fixture
def proxy(moto: str) -> Iterator[MotoFaultProxy]:
    with MotoFaultProxy(moto) as running:
        yield running


@pytest.fixture
def ledger(store_url: str) -> Iterator[Ledger]:
    opened = Ledger.open(store_url, retry=FAST_RETRY)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def boto_session() -> boto3.session.Session:
    """One session for the suite: its loader caches the service models, so clients build fast."""
    return boto3.session.Session()


@pytest.fixture
def wrapped(ledger: Ledger, proxy: MotoFaultProxy, boto_session: boto3.session.Session) -> Factory:
    """Wrapped clients talking to moto through the proxy, with short timeouts for delay faults."""

    def make(service: str, **options: Any) -> Any:
        options = {
            "session": boto_session,
            "configuration_set": "safe-effects",
            "read_timeout": 1.0,
            "connect_timeout": 1.0,
            "endpoint_url": proxy.url,
            **options,
        }
        return ses_safe.client(service, ledger=ledger, region_name=REGION, **CREDENTIALS, **options)  # type: ignore[call-overload]

    return make


@dataclass
class SesEnv:
    """Both sides of every assertion: the ledger and what moto (through the proxy) really got."""

    ledger: Ledger
    proxy: MotoFaultProxy
    moto_url: str
    wrapped: Factory

    @functools.cached_property
    def sesv2(self) -> ses_safe.SafeSESv2Client:
        return self.wrapped("sesv2")  # type: ignore[no-any-return]

    @functools.cached_property
    def ses(self) -> ses_safe.SafeSESClient:
        return self.wrapped("ses")  # type: ignore[no-any-return]

    def sent(self) -> list[dict[str, Any]]:
        return moto_sent_messages(self.moto_url)


@pytest.fixture
def env(ledger: Ledger, proxy: MotoFaultProxy, moto: str, wrapped: Factory) -> SesEnv:
    return SesEnv(ledger, proxy, moto, wrapped)


@pytest.fixture
def queue(moto: str, raw_client: Factory) -> tuple[Any, str]:
    """An SQS client and a fresh queue standing in for the SNS->SQS subscription of the event destination."""
    sqs = raw_client("sqs")
    return sqs, sqs.create_queue(QueueName=f"ses-events-{uuid.uuid4().hex[:8]}")["QueueUrl"]


@pytest.fixture
def lose_a_send(sesv2: Any, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any]) -> LoseASend:
    """Send ``key`` once with its response lost (unknown); returns moto's MessageId and the tags that went out."""

    def lose(key: str) -> tuple[str, dict[str, str]]:
        proxy.inject(Fault.drop_after_commit())
        with pytest.raises(EffectUnknown):
            sesv2.send_email(IntentKey=key, **v2_email)
        [sent] = moto_sent_messages(moto)
        return sent["id"], intent_tags(intent_tag(IntentKey.parse(key)), tenant_tag("default"))

    return lose


@pytest.fixture
def v2_email() -> dict[str, Any]:
    return {
        "FromEmailAddress": SENDER,
        "Destination": {"ToAddresses": ["customer@example.com"]},
        "Content": {"Simple": {"Subject": {"Data": "Your invoice"}, "Body": {"Text": {"Data": "Thanks."}}}},
    }


@pytest.fixture
def v1_email() -> dict[str, Any]:
    return {
        "Source": SENDER,
        "Destination": {"ToAddresses": ["customer@example.com"]},
        "Message": {"Subject": {"Data": "Your invoice"}, "Body": {"Text": {"Data": "Thanks."}}},
    }


@pytest.fixture
def unused_port() -> int:
    """A local port nobody listens on: connections to it are refused before anything is sent."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def emails(v1_email: dict[str, Any], v2_email: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The same email in each service's call shape."""
    return {"ses": v1_email, "sesv2": v2_email}


@pytest.fixture
def sesv2(env: SesEnv) -> ses_safe.SafeSESv2Client:
    return env.sesv2


@pytest.fixture
def ses(env: SesEnv) -> ses_safe.SafeSESClient:
    return env.ses
