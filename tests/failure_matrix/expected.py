"""The failure matrix, expected: case x provider -> what the provider, the ledger and the caller end with.

This is the one place the release gate's answers live. ``test_matrix.py`` runs every cell with real worker
processes and compares what it observed to :data:`EXPECTED`, field by field; ``scripts/failure_matrix_report.py``
renders both into docs/failure-matrix.md. Change a cell only on purpose, with its ``why``.

Fixed assumptions of the fakes (so the cells can be exact):

- FakeStripe dedupes by Idempotency-Key for 24 h on its FakeClock; its Search index has no lag.
- FakeSendGrid has the Email Activity add-on, but its index lags: a message is not searchable until the
  "later retry" case (``activity_visible``), as right after a send on the real API.
- SES (moto behind MotoFaultProxy) dedupes nothing and has no lookup for a send without a MessageId; its
  events (SNS -> SQS) are the evidence that settles an unknown send.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

PROVIDERS = ("stripe", "sendgrid", "ses")


class Case(StrEnum):
    BEFORE_DISPATCH = "before_dispatch"
    AFTER_DISPATCH = "after_dispatch"
    AFTER_PROVIDER_ACCEPT = "after_provider_accept"
    AFTER_RESPONSE = "after_response"
    DURING_RECEIPT_PERSIST = "during_receipt_persist"
    TWO_WORKERS = "two_workers"
    RESPONSE_DELAYED = "response_delayed"
    RATE_LIMITED = "rate_limited_429"
    RATE_LIMITED_PERSISTENT = "rate_limited_429_persistent"
    SERVER_ERROR = "server_error_500"
    SERVER_ERROR_AFTER_COMMIT = "server_error_500_after_commit"
    RETRY_AFTER_WINDOW = "retry_after_window"


TITLES: dict[Case, str] = {
    Case.BEFORE_DISPATCH: "worker SIGKILLed before dispatch (crash point in the worker), then restarted",
    Case.AFTER_DISPATCH: "worker SIGKILLed when the request reached the provider (fake's on_received hook), "
    "then restarted",
    Case.AFTER_PROVIDER_ACCEPT: "worker SIGKILLed once the provider committed the effect (fake's on_committed "
    "hook), then restarted",
    Case.AFTER_RESPONSE: "worker SIGKILLed after the response arrived, before the receipt (crash point), "
    "then restarted",
    Case.DURING_RECEIPT_PERSIST: "worker SIGKILLed inside the confirm transaction (crash point), then restarted",
    Case.TWO_WORKERS: "two workers start the same intent at the same moment (the provider answers after 1 s)",
    Case.RESPONSE_DELAYED: "the answer is delayed 3 s past the worker's 1 s read timeout; the caller retries",
    Case.RATE_LIMITED: "one 429 (Retry-After: 0), then the provider accepts",
    Case.RATE_LIMITED_PERSISTENT: "429 on every attempt of the first call (retry budget: 3); the caller retries later",
    Case.SERVER_ERROR: "500 before the provider acted; the caller retries",
    Case.SERVER_ERROR_AFTER_COMMIT: "500 after the provider committed the effect; the caller retries",
    Case.RETRY_AFTER_WINDOW: "SIGKILLed after the provider accepted; the retry comes 25 h later (worker clock and "
    "fake clock moved together), past Stripe's 24 h key retention",
}


@dataclass(frozen=True, slots=True)
class Step:
    """One round of callers: what they saw (``"a & b"`` for concurrent callers, sorted) and the ledger after."""

    outcome: str  # "killed", "confirmed", or an EffectOutcome code ("effect_unknown", "effect_deferred", ...)
    status: str  # the record's status once the round is over


@dataclass(frozen=True, slots=True)
class Cell:
    steps: tuple[Step, ...]
    requests: int  # write requests that reached the provider (refused, replayed and duplicate ones included)
    effects: int  # effects the provider committed: PaymentIntents created / messages accepted
    resolution: str | None  # record.resolution.method at the end; None while the record is unsettled
    settles_by: str | None = None  # an unknown record: the evidence that settles it, or "operator"
    why: str = ""  # for a cell whose answer is not obvious: why it is the right one

    @property
    def status(self) -> str:
        return self.steps[-1].status

    @property
    def outcome(self) -> str:
        return self.steps[-1].outcome

    def compared(self) -> dict[str, object]:
        """The fields a run must reproduce exactly (``why`` is prose)."""
        return {
            "steps": [(s.outcome, s.status) for s in self.steps],
            "requests": self.requests,
            "effects": self.effects,
            "resolution": self.resolution,
            "settles_by": self.settles_by,
        }


KILLED = Step("killed", "in_flight")
CONFIRMED = Step("confirmed", "confirmed")
UNKNOWN = Step("effect_unknown", "unknown")
SG_EVENT = "evidence:sendgrid_webhook"
SES_EVENT = "evidence:ses_event"


def _killed(provider: str, requests_before_restart: int, effects: int, *, why: str = "") -> Cell:
    """A worker killed somewhere in the effect path, then a restarted worker on the same intent."""
    if provider == "stripe":
        return Cell((KILLED, CONFIRMED), requests_before_restart + 1, 1, "key_replay", why=why)
    settle = SG_EVENT if provider == "sendgrid" else SES_EVENT
    return Cell(
        (KILLED, Step("effect_unknown", "unknown")),
        requests_before_restart,
        effects,
        None,
        settle if effects else "operator",
        why=why,
    )


_NO_SEND_UNKNOWN = (
    "nothing reached {p}, but the restarted worker cannot tell this death from one just after sending: {p} "
    "has no key to replay and {absent}, so the intent stays unknown (listed by list_by_status([unknown])) "
    "and is not resent; an operator who checked the provider resolves it"
)
_REFUSED_UNKNOWN = (
    "{p} answered 500 without acting, but a 500 does not promise that: unknown, never resent; the lookup "
    "finds nothing, no event will come, so an operator resolves it"
)
_SENT_UNKNOWN = (
    "{p} accepted the message, but the worker died before recording it. A restarted worker does not resend "
    "(no idempotency) and its lookup finds nothing yet ({lookup}), so the intent stays unknown; the "
    "provider's event ({event}) settles it confirmed, as the test then checks"
)
_SG = {"p": "SendGrid", "lookup": "Email Activity lags", "event": "Event Webhook 'delivered'"}
_SES = {"p": "SES", "lookup": "no MessageId to ask insights for", "event": "SES 'Delivery' event via SNS/SQS"}


def _row(case: Case, stripe: Cell, sendgrid: Cell, ses: Cell) -> dict[tuple[Case, str], Cell]:
    return {(case, "stripe"): stripe, (case, "sendgrid"): sendgrid, (case, "ses"): ses}


EXPECTED: dict[tuple[Case, str], Cell] = {
    **_row(
        Case.BEFORE_DISPATCH,
        _killed(
            "stripe",
            0,
            1,
            why="the restarted worker finds the lease expired, marks the intent unknown and replays the same "
            "key inside the 24 h window: the replay is the first request Stripe sees, so it runs once",
        ),
        _killed(
            "sendgrid", 0, 0, why=_NO_SEND_UNKNOWN.format(p="SendGrid", absent="an Email Activity miss proves nothing")
        ),
        _killed("ses", 0, 0, why=_NO_SEND_UNKNOWN.format(p="SES", absent="no lookup can prove a send absent")),
    ),
    **_row(
        Case.AFTER_DISPATCH,
        _killed(
            "stripe",
            1,
            1,
            why="the request was complete when the worker died, so Stripe ran it and saved the result; the "
            "restarted worker's same-key replay gets that result back (Idempotent-Replayed), no second charge",
        ),
        _killed("sendgrid", 1, 1, why=_SENT_UNKNOWN.format(**_SG)),
        _killed("ses", 1, 1, why=_SENT_UNKNOWN.format(**_SES)),
    ),
    **_row(
        Case.AFTER_PROVIDER_ACCEPT,
        _killed("stripe", 1, 1),
        _killed("sendgrid", 1, 1, why=_SENT_UNKNOWN.format(**_SG)),
        _killed("ses", 1, 1, why=_SENT_UNKNOWN.format(**_SES)),
    ),
    **_row(
        Case.AFTER_RESPONSE,
        _killed("stripe", 1, 1),
        _killed(
            "sendgrid",
            1,
            1,
            why="the worker held the 202 and died before writing it down: what the provider did is known "
            "only to the dead process, so the ledger says unknown, not confirmed; the webhook event settles it",
        ),
        _killed("ses", 1, 1, why="as SendGrid: the MessageId died with the worker; the Delivery event settles it"),
    ),
    **_row(
        Case.DURING_RECEIPT_PERSIST,
        _killed("stripe", 1, 1, why="the confirm transaction rolled back with the worker: the record is in_flight"),
        _killed("sendgrid", 1, 1, why="the confirm rolled back: unknown, not confirmed, until the event arrives"),
        _killed("ses", 1, 1, why="the confirm rolled back: unknown, not confirmed, until the event arrives"),
    ),
    **_row(
        Case.TWO_WORKERS,
        *(
            Cell(
                (Step("confirmed & confirmed", "confirmed"),),
                1,
                1,
                "provider_response",
                why=why,
            )
            for why in (
                "the unique (tenant, intent) row decides: the loser waits for the winner's receipt and "
                "returns it; Stripe's key would have caught a second request anyway (409)",
                "SendGrid would send twice; the ledger's claim lets only one request out",
                "SES would send twice; the ledger's claim lets only one request out",
            )
        ),
    ),
    **_row(
        Case.RESPONSE_DELAYED,
        Cell(
            (UNKNOWN, CONFIRMED),
            2,
            1,
            "key_replay",
            why="a read timeout after sending is unknown, never failure; the caller's retry replays the key "
            "and gets Stripe's saved result",
        ),
        Cell(
            (UNKNOWN, UNKNOWN),
            1,
            1,
            None,
            SG_EVENT,
            why="SendGrid accepted while the client gave up; the retry does not resend and the activity lookup "
            "finds nothing yet: unknown until the webhook event",
        ),
        Cell((UNKNOWN, UNKNOWN), 1, 1, None, SES_EVENT, why="as SendGrid; the SES Delivery event settles it"),
    ),
    **_row(
        Case.RATE_LIMITED,
        *(
            Cell(
                (CONFIRMED,),
                2,
                1,
                "provider_response",
                why="a 429 is refused before the provider acts, so the boundary retries it with the same key",
            )
            for _ in PROVIDERS
        ),
    ),
    **_row(
        Case.RATE_LIMITED_PERSISTENT,
        *(
            Cell(
                (Step("effect_deferred", "prepared"), CONFIRMED),
                4,
                1,
                "provider_response",
                why="three 429s exhaust the retry budget: every refusal was definitive, so the intent goes "
                "back to prepared and the caller gets EffectDeferred; the next call dispatches it once",
            )
            for _ in PROVIDERS
        ),
    ),
    **_row(
        Case.SERVER_ERROR,
        Cell(
            (UNKNOWN, CONFIRMED),
            2,
            1,
            "key_replay",
            why="a 500 may come after the endpoint ran, so it is unknown; the replay with the same key runs the "
            "request once (this fake's 500 came before the endpoint; a saved 500 would be replayed as 500 and "
            "stay unknown)",
        ),
        Cell((UNKNOWN, UNKNOWN), 1, 0, None, "operator", why=_REFUSED_UNKNOWN.format(p="SendGrid")),
        Cell((UNKNOWN, UNKNOWN), 1, 0, None, "operator", why=_REFUSED_UNKNOWN.format(p="SES")),
    ),
    **_row(
        Case.SERVER_ERROR_AFTER_COMMIT,
        Cell(
            (UNKNOWN, UNKNOWN),
            2,
            1,
            None,
            "lookup:search",
            why="Stripe saves a 500 once the endpoint ran, so the same-key replay gets the saved 500 back and the "
            "intent stays unknown (never confirmed on a guess); the reconciler's metadata search finds the "
            "PaymentIntent and confirms it without a write",
        ),
        Cell(
            (UNKNOWN, UNKNOWN),
            1,
            1,
            None,
            SG_EVENT,
            why="the dangerous 500: SendGrid queued the message, then answered 500. Classified unknown (not "
            "failed, not retried), so the caller's retry does not send a second copy; the webhook event settles it",
        ),
        Cell((UNKNOWN, UNKNOWN), 1, 1, None, SES_EVENT, why="as SendGrid; the SES Delivery event settles it"),
    ),
    **_row(
        Case.RETRY_AFTER_WINDOW,
        Cell(
            (KILLED, CONFIRMED),
            1,
            1,
            "lookup:search",
            why="25 h later Stripe has forgotten the key, so a replay would charge again: the ledger does not "
            "replay past the window (minus a 1 h margin) and finds the PaymentIntent by the metadata the "
            "wrapper stamped (Search API); one request ever reached Stripe",
        ),
        Cell(
            (KILLED, CONFIRMED),
            1,
            1,
            "lookup:activity_api",
            why="SendGrid has no window to miss; a day later Email Activity has indexed the message and the "
            "lookup by custom_args confirms it, without a resend",
        ),
        Cell(
            (KILLED, UNKNOWN),
            1,
            1,
            None,
            SES_EVENT,
            why="SES has no window and no lookup without a MessageId: however late the retry, it does not "
            "resend; the Delivery event settles it",
        ),
    ),
}

assert len(EXPECTED) == len(Case) * len(PROVIDERS), "every case has a cell for every provider"
