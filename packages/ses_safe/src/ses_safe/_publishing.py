"""Whether a configuration set publishes the events that settle a lost send, asked of SES itself.

SES has no idempotency, and nothing to look a send up by without the MessageId its lost answer carried: a send
whose answer was lost is settled by the events its configuration set publishes (docs/providers/ses.md,
Lookup strategy). A set that publishes none, or only to CloudWatch or Firehose, or not the event types that
decide, leaves every lost send unknown until an operator resolves it by hand, and nothing says so before the
first one. :func:`check_event_publishing` says so at deploy time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_sesv2 import SESV2Client

# event types that show SES tried to deliver: any one of them confirms a lost send (see ses_safe._events)
CONFIRMING_EVENTS = frozenset({"DELIVERY", "BOUNCE", "COMPLAINT", "DELIVERY_DELAY", "OPEN", "CLICK", "SUBSCRIPTION"})
# each settles a lost send SES took but did not send: a virus found, a template that did not render
REJECTING_EVENTS = ("REJECT", "RENDERING_FAILURE")
# the destinations whose events can reach SQSEventPoller (SNS -> SQS, EventBridge rule -> SQS)
_REACHING_THE_POLLER = ("SnsDestination", "EventBridgeDestination")


@dataclass(frozen=True, slots=True)
class EventPublishing:
    """What a configuration set publishes where the event poller can read it, and what that leaves unsettled."""

    configuration_set: str
    destinations: tuple[str, ...]  # enabled SNS and EventBridge destinations, by name
    event_types: frozenset[str]  # what those publish (SES's names: DELIVERY, REJECT ...)
    problems: tuple[str, ...]  # each a lost send that would stay unknown, and why; empty when none

    @property
    def ok(self) -> bool:
        return not self.problems


def check_event_publishing(sesv2: SESV2Client, configuration_set: str) -> EventPublishing:
    """Ask SES (``GetConfigurationSetEventDestinations``, the SESv2 API) what ``configuration_set``
    publishes, through a boto3 ``sesv2`` client (``ses_safe.client("sesv2", ...)`` passes it through).

    A missing set is a problem, not an error: SES refuses every send that names it. The caller's role needs
    ``ses:GetConfigurationSetEventDestinations``; any error but a missing set is raised as botocore's.
    """
    try:
        answer = sesv2.get_configuration_set_event_destinations(ConfigurationSetName=configuration_set)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NotFoundException":
            raise
        missing = f"configuration set {configuration_set!r} does not exist here: SES refuses every send naming it"
        return EventPublishing(configuration_set, (), frozenset(), (missing,))
    reaching = [d for d in answer.get("EventDestinations", []) if _reaches_the_poller(d)]
    published = frozenset(kind for destination in reaching for kind in destination.get("MatchingEventTypes", []))
    return EventPublishing(
        configuration_set,
        tuple(str(destination.get("Name", "")) for destination in reaching),
        published,
        _problems(configuration_set, published, reached=bool(reaching)),
    )


def _reaches_the_poller(destination: Mapping[str, Any]) -> bool:
    return bool(destination.get("Enabled")) and any(kind in destination for kind in _REACHING_THE_POLLER)


def _problems(configuration_set: str, published: frozenset[str], *, reached: bool) -> tuple[str, ...]:
    if not reached:
        return (
            f"configuration set {configuration_set!r} has no enabled SNS or EventBridge event destination: no "
            "event reaches SQSEventPoller, and every lost send stays unknown until an operator resolves it",
        )
    problems = []
    if not published & CONFIRMING_EVENTS:
        problems.append(
            f"configuration set {configuration_set!r} publishes none of {', '.join(sorted(CONFIRMING_EVENTS))}: "
            "nothing confirms a send whose answer was lost"
        )
    problems += [
        f"configuration set {configuration_set!r} does not publish {kind}: a lost send SES took but refused to "
        "deliver stays unknown"
        for kind in REJECTING_EVENTS
        if kind not in published
    ]
    return tuple(problems)
