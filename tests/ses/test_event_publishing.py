"""``check_event_publishing``: what a configuration set publishes where SQSEventPoller can read it, asked of
SES through the real boto3 sesv2 client (the wrapped one passes the read through), and what that leaves
unsettled. moto has no GetConfigurationSetEventDestinations: the fault proxy answers it in the API's shape,
which botocore parses by SES's own service model."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

import ses_safe
from ses_safe.testing import MotoFaultProxy

from .conftest import Factory

SET = "transactional"
SNS = {"TopicArn": "arn:aws:sns:us-east-1:123456789012:ses-events"}
BUS = {"EventBusArn": "arn:aws:events:us-east-1:123456789012:event-bus/default"}
ALL_THAT_DECIDES = ["SEND", "DELIVERY", "REJECT", "RENDERING_FAILURE"]


def _destination(name: str, kinds: list[str], *, enabled: bool = True, **where: Any) -> dict[str, Any]:
    return {"Name": name, "Enabled": enabled, "MatchingEventTypes": kinds, **where}


def test_a_set_publishing_what_decides_to_sns_or_eventbridge_has_no_problem(
    proxy: MotoFaultProxy, wrapped: Factory, raw_client: Factory
) -> None:
    proxy.set_event_destinations(
        SET,
        [
            _destination("to-sns", ["SEND", "DELIVERY", "BOUNCE"], SnsDestination=SNS),
            _destination("to-bus", ["REJECT", "RENDERING_FAILURE"], EventBridgeDestination=BUS),
            _destination("dashboards", ["OPEN"], CloudWatchDestination={"DimensionConfigurations": []}),
        ],
    )
    for client in (wrapped("sesv2"), raw_client("sesv2", proxy.url)):  # the wrapped client and boto3's own
        report = ses_safe.check_event_publishing(client, SET)
        assert report.ok
        assert report.problems == ()
        assert report.destinations == ("to-sns", "to-bus")  # CloudWatch's events never reach the poller
        assert report.event_types == {"SEND", "DELIVERY", "BOUNCE", "REJECT", "RENDERING_FAILURE"}
    assert proxy.sends() == []  # a read: nothing was sent


@pytest.mark.parametrize(
    ("destinations", "problems"),
    [
        pytest.param([], ["has no enabled SNS or EventBridge event destination"], id="none"),
        pytest.param(
            [_destination("off", ALL_THAT_DECIDES, enabled=False, SnsDestination=SNS)],
            ["has no enabled SNS or EventBridge event destination"],
            id="disabled",
        ),
        pytest.param(
            [_destination("metrics", ALL_THAT_DECIDES, CloudWatchDestination={"DimensionConfigurations": []})],
            ["has no enabled SNS or EventBridge event destination"],
            id="cloudwatch-only",
        ),
        pytest.param(
            [_destination("sends", ["SEND", "REJECT", "RENDERING_FAILURE"], SnsDestination=SNS)],
            ["publishes none of BOUNCE, CLICK, COMPLAINT, DELIVERY, DELIVERY_DELAY, OPEN, SUBSCRIPTION"],
            id="nothing-confirms",
        ),
        pytest.param(
            [_destination("bounces", ["BOUNCE", "COMPLAINT"], SnsDestination=SNS)],
            ["does not publish REJECT", "does not publish RENDERING_FAILURE"],
            id="nothing-rejects",
        ),
    ],
)
def test_a_set_that_leaves_lost_sends_unknown_says_which_and_why(
    proxy: MotoFaultProxy, wrapped: Factory, destinations: list[dict[str, Any]], problems: list[str]
) -> None:
    proxy.set_event_destinations(SET, destinations)
    report = ses_safe.check_event_publishing(wrapped("sesv2"), SET)
    assert not report.ok
    assert len(report.problems) == len(problems)
    for problem, expected in zip(report.problems, problems, strict=True):
        assert problem.startswith(f"configuration set {SET!r} {expected}"), problem


def test_a_set_that_does_not_exist_is_a_problem_and_an_unanswered_question_is_raised(
    proxy: MotoFaultProxy, wrapped: Factory, raw_client: Factory, unused_port: int
) -> None:
    report = ses_safe.check_event_publishing(wrapped("sesv2"), "typo")
    assert report.problems == ("configuration set 'typo' does not exist here: SES refuses every send naming it",)
    assert (report.destinations, report.event_types) == ((), frozenset())

    proxy.refuse_event_destinations(SET, "AccessDeniedException", status=403)
    with pytest.raises(ClientError, match="AccessDeniedException"):  # the role lacks the right: no verdict
        ses_safe.check_event_publishing(wrapped("sesv2"), SET)
    nobody = raw_client("sesv2", f"http://127.0.0.1:{unused_port}", config=Config(retries={"total_max_attempts": 1}))
    with pytest.raises(EndpointConnectionError):  # no answer is no verdict either: raised, never "no problem"
        ses_safe.check_event_publishing(nobody, SET)
