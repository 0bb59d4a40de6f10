"""What the ledger adds to an SES send: wrapped vs raw boto3 ``sesv2.send_email`` against one local moto server.

moto runs in its own process, like a remote SES: its work does not share this process's GIL. Per store
(SQLite file; PostgreSQL schema when reachable), interleaved in one loop: a raw boto3 ``send_email``, a
wrapped ``ses_safe`` ``send_email`` (new intent each, same boto3 session and endpoint), the store's raw
two-commit floor (see _harness.py), and, as an extra line, the same wrapper and ledger over a transport that
answers at once (the wrapper's cost without any HTTP). Prints the medians, the added time per call and
added ÷ two-commit (target <= 1.5).

    .venv/bin/python bench/ses_overhead.py [--calls 150] [--seconds 40] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import boto3
from _harness import Calls, fresh_key, overhead_main

import ses_safe
from safe_effects import Ledger

REGION = "us-east-1"
SENDER = "sender@example.com"
KEY_ID = SECRET = "bench"  # moto accepts any credentials
EMAIL: dict[str, Any] = {  # sesv2 send_email keyword arguments
    "FromEmailAddress": SENDER,
    "Destination": {"ToAddresses": ["customer@example.com"]},
    "Content": {"Simple": {"Subject": {"Data": "Receipt"}, "Body": {"Text": {"Data": "Thanks."}}}},
}


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free port, with the sender verified; its URL. Stopped afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("moto server did not start within 10 s")
        ses = boto3.client(
            "ses", region_name=REGION, endpoint_url=url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET
        )
        ses.verify_email_identity(EmailAddress=SENDER)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def calls(moto_url: str, ledger: Ledger) -> Calls:
    session = boto3.session.Session()
    raw = session.client(
        "sesv2", region_name=REGION, endpoint_url=moto_url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET
    )
    wrapped = ses_safe.client(
        "sesv2",
        ledger=ledger,
        session=session,
        region_name=REGION,
        endpoint_url=moto_url,
        configuration_set="bench",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )
    # answers at once; its botocore model (meta) serves the wrapper's parameter check, as a real client's does
    stub = SimpleNamespace(meta=raw.meta, send_email=lambda **_: {"MessageId": uuid.uuid4().hex})
    no_http = ses_safe.SafeSESv2Client(
        raw=None, adapter=ses_safe.SesAdapter(stub), ledger=ledger, tenant="default", configuration_set="bench"
    )
    return Calls(
        raw=lambda: raw.send_email(**EMAIL),
        wrapped=lambda: wrapped.send_email(IntentKey=fresh_key("send"), **EMAIL),
        extra={"wrapper+ledger without HTTP": lambda: no_http.send_email(IntentKey=fresh_key("send"), **EMAIL)},
    )


if __name__ == "__main__":
    overhead_main(__doc__ or "", fake=moto_server, calls=calls)
