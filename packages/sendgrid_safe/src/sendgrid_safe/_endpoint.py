"""What the webhook endpoints answer, whatever server runs them: one set of rules for WSGI and ASGI."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from safe_effects import Ledger

from ._signature import PublicKey, WebhookSignatureError
from ._webhook import MalformedWebhook, ingest_events

_log = logging.getLogger("sendgrid_safe")
MAX_BODY = 8 * 1024 * 1024  # SendGrid batches are far smaller; a bigger body is not SendGrid

_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    411: "Length Required",
    405: "Method Not Allowed",
    413: "Content Too Large",
}


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status and a JSON payload (counts, or an error code)."""

    status: int
    payload: Mapping[str, Any]

    @property
    def status_line(self) -> str:
        return f"{self.status} {_REASONS[self.status]}"

    @property
    def body(self) -> bytes:
        return json.dumps(self.payload).encode()


NOT_POST = Answer(405, {"error": "POST only"})
TOO_LARGE = Answer(413, {"error": "body too large"})
BAD_LENGTH = Answer(400, {"error": "bad Content-Length"})
NO_LENGTH = Answer(411, {"error": "Content-Length required"})


def declared_length(value: str | None, max_body: int) -> int | Answer:
    """The Content-Length a request declares (0 when absent), or the answer refusing it."""
    try:
        length = int(value or 0)
    except ValueError:
        return BAD_LENGTH
    if length < 0:
        return BAD_LENGTH
    return TOO_LARGE if length > max_body else length


def read_to_eof(stream: Any, max_body: int, chunk_size: int = 64 * 1024) -> bytes | Answer:
    """A body that declares no length (chunked) read to its end, TOO_LARGE as soon as it passes ``max_body``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(min(chunk_size, max_body + 1 - size))  # never more than one byte past the cap
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_body:
            return TOO_LARGE
        chunks.append(chunk)


def answer_events(ledger: Ledger, body: bytes, headers: Mapping[str, str], key: PublicKey | None) -> Answer:
    """Ingest one POST body: 200 with the counts, 403 for a bad signature, 400 for anything not an event array."""
    try:
        report = ingest_events(ledger, body, headers, public_key=key)
    except WebhookSignatureError as error:
        # a forgery, or (every POST refused) a verification key that is not this account's: events are lost
        _log.warning("SendGrid event webhook POST refused with 403 (%s): %s; nothing recorded", error.code, error)
        return Answer(403, {"error": error.code})
    except MalformedWebhook as error:
        _log.warning("SendGrid event webhook POST refused with 400 (%s): %s; nothing recorded", error.code, error)
        return Answer(400, {"error": error.code})
    return Answer(200, asdict(report))
