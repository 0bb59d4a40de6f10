"""Run a moto server, and read and reset it over its own HTTP API, so tests need no moto internals."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from safe_effects import MissingDependency


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free port of 127.0.0.1, in a thread of this process; yields its URL."""
    try:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415  # optional extra: ses-safe[testing]
    except ImportError as error:
        raise MissingDependency("moto", "testing", distribution="ses-safe") from error
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def moto_sent_messages(moto_url: str) -> list[dict[str, Any]]:
    """Every email the moto server accepted since its last reset (simple, raw and templated; v1 and v2)."""
    with urllib.request.urlopen(f"{moto_url}/moto-api/data.json") as answer:
        ses = json.load(answer).get("ses", {})
    return [*ses.get("Message", []), *ses.get("RawMessage", []), *ses.get("TemplateMessage", [])]


def reset_moto(moto_url: str) -> None:
    """Empty every moto backend (sent messages, identities, queues)."""
    request = urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request):
        pass
