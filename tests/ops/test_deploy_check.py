"""``safe-effects check``: a deploy's preflight, run as an operator runs it (the CLI, the environment the
reconciler reads, the adapters the installed packages register) against FakeStripe, FakeSendGrid and moto
behind the fault proxy. Each case asserts the report and exit status, and that the providers saw reads only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from safe_effects import DeployCheck
from safe_effects._deploy_check import deploy_check_of
from safe_effects.cli._app import app
from sendgrid_safe.testing import FakeSendGrid
from ses_safe import SesAdapter
from ses_safe.pytest_plugin import FAKE_AWS_ENVIRONMENT
from ses_safe.testing import MotoFaultProxy
from stripe_safe.testing import FakeStripe

from .conftest import Ops

ENDPOINT = "https://billing.example.com/sendgrid/events"
SNS = {"TopicArn": "arn:aws:sns:us-east-1:123456789012:ses-events"}
SES_EVENTS = ["SEND", "DELIVERY", "BOUNCE", "REJECT", "RENDERING_FAILURE"]

Run = Callable[..., Any]


@pytest.fixture
def providers(fake_stripe: FakeStripe, fake_sendgrid: FakeSendGrid, fake_ses: MotoFaultProxy) -> dict[str, str]:
    """The environment the three registered adapters build from, every setting a check reads given."""
    fake_sendgrid.add_event_webhook(ENDPOINT)
    to_sns = {"Name": "to-sns", "Enabled": True, "SnsDestination": SNS, "MatchingEventTypes": SES_EVENTS}
    fake_ses.set_event_destinations("transactional", [to_sns])
    return {
        **FAKE_AWS_ENVIRONMENT,
        "STRIPE_API_KEY": "sk_test_check",
        "STRIPE_API_BASE": fake_stripe.url,
        "SENDGRID_API_KEY": "SG.fake-key",
        "SENDGRID_HOST": fake_sendgrid.url,
        "SENDGRID_WEBHOOK_URL": ENDPOINT,
        "SENDGRID_WEBHOOK_PUBLIC_KEY": fake_sendgrid.signer.public_key,
        "SES_SAFE_ENDPOINT_URL": fake_ses.url,
        "SES_SAFE_REGION": "us-east-1",
        "SES_SAFE_CONFIGURATION_SETS": "transactional",
    }


@pytest.fixture
def check(ops: Ops, providers: dict[str, str]) -> Run:
    """``safe-effects check --json`` with the providers' environment, changed by ``**changes`` (None unsets)."""

    def run(*args: str, **changes: str | None) -> tuple[int, dict[str, Any]]:
        env = {**ops.env, **providers, **changes}
        result = CliRunner().invoke(app, ["check", "--json", *args], env=env)
        return result.exit_code, {report["subject"]: report for report in json.loads(result.stdout)}

    return run


def _no_writes(stripe: FakeStripe, sendgrid: FakeSendGrid, ses: MotoFaultProxy) -> None:
    assert stripe.requests("POST") == []
    assert [r.method for r in stripe.requests()] == ["GET", "GET"]  # a search and an events list
    assert sendgrid.sends() == []
    assert ses.sends() == []


def test_a_deploy_with_every_setting_right_passes_and_sends_nothing(
    check: Run, ops: Ops, fake_stripe: FakeStripe, fake_sendgrid: FakeSendGrid, fake_ses: MotoFaultProxy
) -> None:
    status, reports = check()

    assert status == 0
    assert sorted(reports) == ["sendgrid", "ses", "store", "stripe"]
    for subject, report in reports.items():
        assert report["ok"], subject
        assert report["problems"] == []
        assert report["unchecked"] == []
        assert report["checked"], subject
    on_postgres = ops.url.startswith("postgresql")  # its workers' clocks are compared with the server's
    assert any("clock agrees" in line for line in reports["store"]["checked"]) is on_postgres
    assert any("list events" in line for line in reports["stripe"]["checked"])
    assert any(ENDPOINT in line for line in reports["sendgrid"]["checked"])
    assert any("'transactional' publishes" in line for line in reports["ses"]["checked"])
    _no_writes(fake_stripe, fake_sendgrid, fake_ses)


def test_each_setting_that_would_leave_a_lost_answer_unknown_is_a_problem(
    check: Run, fake_stripe: FakeStripe, fake_sendgrid: FakeSendGrid, fake_ses: MotoFaultProxy
) -> None:
    fake_sendgrid.activity_enabled = False  # the account lacks the Email Activity add-on
    fake_ses.set_event_destinations("marketing", [])
    fake_ses.refuse_event_destinations("audit", "AccessDeniedException", status=403)  # a role without the right

    status, reports = check(
        STRIPE_API_KEY="sk_live_not_this_account",  # refused: the fake takes test keys only
        SENDGRID_WEBHOOK_URL="https://billing.example.com/elsewhere",
        SES_SAFE_CONFIGURATION_SETS="transactional, marketing,audit",
    )

    assert status == 1
    assert reports["store"]["ok"]
    stripe_problems = reports["stripe"]["problems"]
    assert [line.split(" (")[0] for line in stripe_problems] == [
        "the API key cannot search payment intents",
        "the API key cannot list events",
    ]
    assert all("AuthenticationError" in line and "waits for an operator" in line for line in stripe_problems)
    [activity, webhook] = reports["sendgrid"]["problems"]
    assert "Email Activity API refused a search (HTTP 403)" in activity
    assert "SENDGRID_ACTIVITY_LOOKUP=false" in activity
    assert webhook.startswith("no Event Webhook posts to https://billing.example.com/elsewhere")
    [marketing, audit] = reports["ses"]["problems"]
    assert "'marketing' has no enabled SNS or EventBridge event destination" in marketing
    assert audit.startswith("SES did not say what configuration set 'audit' publishes (")
    assert "AccessDeniedException" in audit
    assert any("'transactional' publishes" in line for line in reports["ses"]["checked"])
    assert fake_stripe.requests("POST") == []
    assert fake_sendgrid.sends() == []
    assert fake_ses.sends() == []


def test_a_sendgrid_key_refused_everywhere_is_named_for_each_read(check: Run, fake_sendgrid: FakeSendGrid) -> None:
    status, reports = check(SENDGRID_API_KEY="SG.revoked")

    assert status == 1
    assert [line.split(":")[0] for line in reports["sendgrid"]["problems"]] == [
        "the Email Activity API refused a search (HTTP 401)",
        "SendGrid did not show its Event Webhook settings (HTTP 401)",
    ]
    assert fake_sendgrid.sends() == []


def test_an_ses_adapter_on_a_v1_client_says_it_cannot_check(fake_ses: MotoFaultProxy) -> None:
    v1 = boto3.client("ses", endpoint_url=fake_ses.url, region_name="us-east-1")

    found = SesAdapter(v1).deploy_check({"SES_SAFE_CONFIGURATION_SETS": "transactional"})

    assert found == DeployCheck(
        "ses", unchecked=("the adapter's client is not sesv2, which checking what transactional publish needs",)
    )


def test_what_the_environment_does_not_name_is_reported_unchecked_not_passed(check: Run) -> None:
    status, reports = check(
        SENDGRID_WEBHOOK_URL=None, SENDGRID_WEBHOOK_PUBLIC_KEY=None, SES_SAFE_CONFIGURATION_SETS=None
    )

    assert status == 0  # nothing known to be wrong...
    assert reports["sendgrid"]["unchecked"] == [
        "SENDGRID_WEBHOOK_URL is not set: set it to the Event Webhook endpoint's address to check it"
    ]
    assert reports["ses"]["unchecked"] == [
        "SES_SAFE_CONFIGURATION_SETS is not set: name the configuration sets your sends use to check them"
    ]
    assert reports["ses"]["checked"] == []  # ...but not passed either

    status, reports = check(SENDGRID_WEBHOOK_PUBLIC_KEY=None)  # the webhook is checked, its signing key is not
    assert status == 0
    assert reports["sendgrid"]["unchecked"] == [
        "SENDGRID_WEBHOOK_PUBLIC_KEY is not set: whether the webhook signs with the endpoint's key"
    ]
    assert any(ENDPOINT in line for line in reports["sendgrid"]["checked"])


def test_the_text_report_says_ok_problem_or_how_far_it_checked(ops: Ops, providers: dict[str, str]) -> None:
    env = {**ops.env, **providers, "STRIPE_API_KEY": "sk_live_refused", "SES_SAFE_CONFIGURATION_SETS": ""}
    result = CliRunner().invoke(app, ["check"], env=env)

    assert result.exit_code == 1
    assert "store: ok\n" in result.stdout
    assert "stripe: PROBLEM\n  problem: the API key cannot search payment intents" in result.stdout
    assert "sendgrid: ok\n" in result.stdout
    assert "ses: ok as far as checked\n  not checked: SES_SAFE_CONFIGURATION_SETS is not set" in result.stdout


def test_an_adapter_that_cannot_be_built_and_a_missing_ledger_are_problems(check: Run, tmp_path: Path) -> None:
    status, reports = check(STRIPE_API_KEY=None, SAFE_EFFECTS_STORE=f"sqlite:///{tmp_path / 'nowhere.db'}")

    assert status == 1
    [store_problem] = reports["store"]["problems"]
    assert store_problem.startswith("error [invalid_input]: no ledger at sqlite:///")
    assert reports["stripe"]["problems"] == [
        "the adapter for provider 'stripe' (stripe_safe:adapter_from_env) could not be built: STRIPE_API_KEY is "
        "not set in the environment"
    ]
    assert reports["sendgrid"]["ok"]  # the others are still checked


def test_an_ses_adapter_without_a_region_names_the_setting(check: Run, tmp_path: Path) -> None:
    """botocore's own refusal ("You must specify a region") named no setting to set."""
    unset = dict.fromkeys(("SES_SAFE_REGION", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"))
    status, reports = check(**unset, AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"))

    assert status == 1
    assert reports["ses"]["problems"] == [
        "the adapter for provider 'ses' (ses_safe:adapter_from_env) could not be built: SES_SAFE_REGION (or "
        "AWS_REGION, or a region in the AWS config) is not set in the environment"
    ]


def test_an_adapter_without_a_deploy_check_is_reported_unchecked(ops: Ops) -> None:
    result = CliRunner().invoke(app, ["check", "--json", "--adapters", "ops_fake_adapters:adapters"], env=ops.env)

    assert result.exit_code == 0
    reports = {report["subject"]: report for report in json.loads(result.stdout)}
    assert reports["fake"]["unchecked"] == ["the fake adapter offers no deploy check"]
    assert ops.fake.requests() == []


class _Hooked:
    def __init__(self, answer: Callable[[], object]) -> None:
        self._answer = answer

    def deploy_check(self, env: dict[str, str]) -> object:
        return self._answer()


def test_a_deploy_check_that_raises_is_a_problem_and_one_that_answers_otherwise_a_bug() -> None:
    def outage() -> object:
        raise ConnectionError("provider down")

    found = deploy_check_of(_Hooked(outage), "acme", {})
    assert found == DeployCheck("acme", problems=("the check itself failed: ConnectionError: provider down",))
    assert not found.ok
    with pytest.raises(TypeError, match="the acme adapter's deploy_check returned list, not a DeployCheck"):
        deploy_check_of(_Hooked(lambda: ["fine"]), "acme", {})
