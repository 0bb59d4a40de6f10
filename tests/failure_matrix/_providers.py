"""One face for the three provider fakes, so a matrix case is written once and run against each.

Each class wraps the provider package's own fake (FakeStripe, FakeSendGrid, moto behind MotoFaultProxy) and
says, in that provider's terms: which request is a write, how many effects were committed (and their ids),
how to inject a delay, a 429 or a 500, what "a day later" means, and which event settles an unknown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from safe_effects import Ledger
from safe_effects.testing import FakeClock, FakeHTTPServer, FakeRequest, Fault

if TYPE_CHECKING:
    from sendgrid_safe.testing import FakeSendGrid
    from stripe_safe.testing import FakeStripe

Hook = Callable[[FakeRequest], None]


class ProviderFake(Protocol):
    """What a matrix case needs from a provider fake running in the test process."""

    name: str

    @property
    def url(self) -> str: ...

    @property
    def server(self) -> FakeHTTPServer: ...

    def is_write(self, request: FakeRequest) -> bool: ...

    def write_requests(self) -> int: ...

    def effect_ids(self) -> list[str]: ...

    def inject_delay(self, seconds: float) -> None: ...

    def inject_rate_limit(self, times: int) -> None: ...

    def inject_server_error(self) -> None: ...

    def inject_server_error_after_commit(self) -> None: ...

    def later(self, hours: float) -> None: ...

    def deliver_event(self, ledger: Ledger) -> None: ...


class _ServedFake:
    """What the Stripe and SendGrid cases share: one fake served over HTTP (``self.fake``) and its write path."""

    path: str
    fake: FakeStripe | FakeSendGrid  # imported lazily by each subclass

    def close(self) -> None:
        self.fake.close()

    @property
    def url(self) -> str:
        return self.fake.url

    @property
    def server(self) -> FakeHTTPServer:
        return self.fake.server

    def inject_delay(self, seconds: float) -> None:
        self.fake.inject(Fault.delay(seconds, path_prefix=self.path))


class StripeFake(_ServedFake):
    """FakeStripe on a FakeClock: dedupes by Idempotency-Key for 24 h of that clock."""

    name = "stripe"
    path = "/v1/payment_intents"
    fake: FakeStripe

    def __init__(self) -> None:
        from stripe_safe.testing import FakeStripe

        self.clock = FakeClock(datetime.now(UTC))  # Stripe's clock agrees with the ledger's, as it does live
        self.fake = FakeStripe(clock=self.clock).start()

    def is_write(self, request: FakeRequest) -> bool:
        return request.method == "POST" and request.path.startswith(self.path)

    def write_requests(self) -> int:
        return len(self.fake.requests("POST", self.path))

    def effect_ids(self) -> list[str]:
        ids = [str(pi["id"]) for pi in self.fake.payment_intents]
        assert self.fake.effect_count("payment_intents.create") == len(ids)
        return ids

    def inject_rate_limit(self, times: int) -> None:
        from stripe_safe.testing import rate_limit_fault

        self.fake.inject(rate_limit_fault(retry_after=0, times=times, path_prefix=self.path))

    def inject_server_error(self) -> None:
        from stripe_safe.testing import server_error_fault

        self.fake.inject(server_error_fault(path_prefix=self.path))

    def inject_server_error_after_commit(self) -> None:
        # Stripe saves a 500 once the endpoint ran: every same-key replay in the window gets it back
        self.fake.fail_next_write(after_commit=True)

    def later(self, hours: float) -> None:
        self.clock.advance(timedelta(hours=hours))

    def deliver_event(self, ledger: Ledger) -> None:
        """Stripe sends nothing to settle it: the reconciler's metadata search does, with no write."""
        from safe_effects import Reconciler
        from stripe_safe import adapter_from_env

        adapter = adapter_from_env({"STRIPE_API_KEY": "sk_test_reconciler", "STRIPE_API_BASE": self.url})
        Reconciler(ledger, {"stripe": adapter}).run_once()


class SendGridFake(_ServedFake):
    """FakeSendGrid with the Email Activity add-on whose index lags until :meth:`later`."""

    name = "sendgrid"
    path = "/v3/mail/send"
    fake: FakeSendGrid

    def __init__(self) -> None:
        from sendgrid_safe.testing import FakeSendGrid

        self.fake = FakeSendGrid(api_key="SG.fake-key").start()
        self.fake.activity_visible = False  # right after a send, Email Activity does not show it yet

    def is_write(self, request: FakeRequest) -> bool:
        return request.method == "POST" and request.path == self.path

    def write_requests(self) -> int:
        return len(self.fake.sends())

    def effect_ids(self) -> list[str]:
        return [message.message_id for message in self.fake.messages]

    def inject_rate_limit(self, times: int) -> None:
        body = {"errors": [{"message": "too many requests", "field": None, "help": None}]}
        self.fake.inject(
            Fault.status_code(429, body=body, headers={"Retry-After": "0"}, times=times, path_prefix=self.path)
        )

    def inject_server_error(self) -> None:
        body = {"errors": [{"message": "internal error", "field": None, "help": None}]}
        self.fake.inject(Fault.status_code(500, body=body, path_prefix=self.path))

    def inject_server_error_after_commit(self) -> None:
        body = {"errors": [{"message": "internal error", "field": None, "help": None}]}
        self.fake.inject(Fault.status_after_commit(500, body=body, path_prefix=self.path))

    def later(self, hours: float) -> None:
        self.fake.activity_visible = True  # a day later the activity index has caught up

    def deliver_event(self, ledger: Ledger) -> None:
        """The signed Event Webhook POST SendGrid makes for the accepted message, verified and ingested."""
        from sendgrid_safe import ingest_events

        [message] = self.fake.messages
        body, headers = self.fake.webhook_request(self.fake.events(message, kinds=("delivered",)))
        report = ingest_events(ledger, body, headers, public_key=self.fake.signer.public_key)
        assert report.recorded == 1, report


class SesFake:
    """moto (shared by the session, reset per test) behind a fresh MotoFaultProxy."""

    name = "ses"

    def __init__(self, moto_url: str, verify_sender: Callable[[], None]) -> None:
        from ses_safe.testing import MotoFaultProxy, reset_moto

        reset_moto(moto_url)
        verify_sender()
        self.moto_url = moto_url
        self.proxy = MotoFaultProxy(moto_url).start()

    def close(self) -> None:
        self.proxy.close()

    path = "/v2/email/outbound-emails"  # SESv2 SendEmail

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def server(self) -> FakeHTTPServer:
        return self.proxy.server

    def is_write(self, request: FakeRequest) -> bool:
        from ses_safe.testing import is_send

        return is_send(request)

    def write_requests(self) -> int:
        return len(self.proxy.sends())

    def effect_ids(self) -> list[str]:
        from ses_safe.testing import moto_sent_messages

        return [str(message["id"]) for message in moto_sent_messages(self.moto_url)]

    def inject_delay(self, seconds: float) -> None:
        self.proxy.inject(Fault.delay(seconds, path_prefix=self.path))

    def inject_rate_limit(self, times: int) -> None:
        self.proxy.refuse_sends(
            "TooManyRequestsException", status=429, message="Maximum sending rate exceeded.", times=times
        )

    def inject_server_error(self) -> None:
        self.proxy.refuse_sends("InternalFailure", status=500, message="Internal error")

    def inject_server_error_after_commit(self) -> None:
        self.proxy.inject(
            Fault.status_after_commit(
                500,
                body={"message": "Internal error"},
                headers={"x-amzn-ErrorType": "InternalFailure"},
                path_prefix=self.path,
            )
        )

    def later(self, hours: float) -> None:
        """SES has no retention window and nothing to look up by tag: time changes nothing on its side."""

    def deliver_event(self, ledger: Ledger) -> None:
        """The SES 'Delivery' event SNS -> SQS would deliver, tagged as the wrapper tagged the request."""
        from ses_safe import IngestOutcome, ingest_event
        from ses_safe.testing import ses_event, sns_envelope

        [message_id] = self.effect_ids()
        wire: dict[str, Any] = json.loads(self.proxy.sends()[-1].body)
        tags = {tag["Name"]: tag["Value"] for tag in wire["EmailTags"]}
        configuration_set = wire["ConfigurationSetName"]  # SES tags each event with the send's set
        published = ses_event("Delivery", message_id=message_id, tags=tags, configuration_set=configuration_set)
        result = ingest_event(ledger, sns_envelope(published), signatures=None)
        assert result.outcome is IngestOutcome.RECORDED, result
