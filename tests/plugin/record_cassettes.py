"""Re-record the example cassettes against our fakes: ``.venv/bin/python -m tests.plugin.record_cassettes``.

Each recording is what a user would capture against the real provider (``record_mode="once"``); here the
fake's 127.0.0.1 address is rewritten to the provider's real one before it is written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3

from safe_effects import Ledger
from safe_effects.testing import fault_cassette
from sendgrid_safe.testing import FakeSendGrid
from ses_safe.testing import moto_server
from stripe_safe.testing import FakeStripe

from . import _scenarios as s


def real_host(fake_url: str, real_url: str) -> Callable[[Any], Any]:
    """A vcrpy before_record_request hook: the fake's address becomes the provider's."""

    def rewrite(request: Any) -> Any:
        request.uri = request.uri.replace(fake_url, real_url, 1)
        if "Host" in request.headers:  # urllib writes it out; keep the recording free of the fake's port
            request.headers["Host"] = real_url.partition("://")[2]
        return request

    return rewrite


def record(name: str, fake_url: str, real_url: str, calls: Callable[[], object]) -> None:
    path = s.CASSETTES / name
    path.unlink(missing_ok=True)
    with fault_cassette(path, before_record_request=real_host(fake_url, real_url)):
        calls()
    print(f"recorded {path}")


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="cassettes-"))
    with FakeStripe() as stripe, Ledger.open(f"sqlite:///{workdir / 'stripe.db'}") as ledger:
        record(s.STRIPE_CREATE, stripe.url, s.STRIPE_API, lambda: s.collect_invoice(ledger, stripe.url))

    with FakeSendGrid(api_key=s.SENDGRID_KEY) as sendgrid, Ledger.open(f"sqlite:///{workdir / 'sg.db'}") as ledger:
        sg = s.sendgrid(ledger, sendgrid.url)

        def send_then_search() -> None:
            s.email_invoice(sg)
            sg.adapter.lookup(ledger.get(s.EMAIL))  # the Email Activity search a reconciliation makes

        record(s.SENDGRID_SEND, sendgrid.url, s.SENDGRID_API, send_then_search)

    with moto_server() as moto_url:
        ses = boto3.client("ses", endpoint_url=moto_url, **s.AWS)  # type: ignore[call-overload]  # AWS: a dict of str
        ses.verify_email_identity(EmailAddress=s.SENDER)
        with Ledger.open(f"sqlite:///{workdir / 'ses.db'}") as ledger:
            record(s.SES_SEND, moto_url, s.SES_API, lambda: s.email_invoice_by_ses(ledger, moto_url))


if __name__ == "__main__":
    main()
