"""Inside the boundary botocore gets one attempt, whatever the environment or ~/.aws/config asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError

import ses_safe
from safe_effects import EffectStatus, EffectUnknown, Ledger
from safe_effects.testing import Fault
from ses_safe.testing import MotoFaultProxy

KEY = "invoice:inv_7:email:v1"
FAULTS = {
    "500": lambda proxy: proxy.refuse_sends("InternalFailure", status=500, times=5),
    "dropped connection": lambda proxy: proxy.inject(Fault.drop_after_commit(times=5)),
    "bare 500 from the proxy": lambda proxy: proxy.inject(Fault.status_code(500, times=5)),
}


@pytest.fixture
def retry_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """AWS_MAX_ATTEMPTS=5 in the environment and a config file asking for 5 attempts too."""
    config_file = tmp_path / "aws-config"
    config_file.write_text("[default]\nmax_attempts = 5\nretry_mode = standard\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")


@pytest.mark.usefixtures("retry_env")
@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_one_request_reaches_the_proxy_despite_aws_max_attempts(env: Any, v2_email: dict[str, Any], fault: Any) -> None:
    fault(env.proxy)
    client = env.wrapped("sesv2", session=boto3.session.Session(), config=Config(retries={"max_attempts": 9}))
    with pytest.raises(EffectUnknown):
        client.send_email(IntentKey=KEY, **v2_email)
    assert len(env.proxy.sends()) == 1
    assert len(env.sent()) == len([e for e in env.proxy.exchanges if e.committed])
    assert env.ledger.get(KEY).status is EffectStatus.UNKNOWN


@pytest.mark.usefixtures("retry_env")
@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_control_plain_boto3_would_have_sent_five_times(
    raw_client: Any, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any], fault: Any
) -> None:
    fault(proxy)
    with pytest.raises((ClientError, ConnectionClosedError)):
        raw_client("sesv2", proxy.url, session=boto3.session.Session()).send_email(**v2_email)
    assert len(proxy.sends()) == 5


@pytest.mark.usefixtures("retry_env")
def test_pass_through_calls_get_one_attempt_too_and_without_ledger_keeps_the_callers_retries(
    ledger: Ledger, proxy: MotoFaultProxy
) -> None:
    """One boto3 client serves sends and pass-through calls (so Stubber and meta.events reach the sends)."""
    client = ses_safe.client(
        "sesv2",
        ledger=ledger,
        session=boto3.session.Session(),
        region_name="us-east-1",
        endpoint_url=proxy.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    assert client.meta is client.adapter.client.meta
    assert client.meta.config.retries == {"total_max_attempts": 1, "mode": "standard"}
    # any method: ListEmailIdentities is GET /v2/email/identities before botocore 1.43.105, POST after
    proxy.inject(Fault.status_code(500, times=10, method=None))
    with pytest.raises(ClientError):
        client.list_email_identities()
    assert len(proxy.exchanges) == 1
    with pytest.raises(ClientError):
        client.without_ledger(reason="reads botocore may retry").list_email_identities()
    assert len(proxy.exchanges) == 1 + 5
