"""A tiny WSGI endpoint for SendGrid's Event Webhook around :func:`ingest_events`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from safe_effects import Ledger

from ._signature import PublicKey, WebhookSignatureError, load_public_key
from ._webhook import MalformedWebhook, ingest_events

MAX_BODY = 8 * 1024 * 1024  # SendGrid batches are far smaller; a bigger body is not SendGrid


def make_wsgi_app(ledger: Ledger, *, public_key: str | PublicKey | None, max_body: int = MAX_BODY) -> WSGIApplication:
    """POST: 200 + counts, 403 bad signature, 400 not an event array, 413 too big, 405 other methods."""
    key = load_public_key(public_key) if public_key is not None else None

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def answer(status: str, payload: object) -> list[bytes]:
            data = json.dumps(payload).encode()
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
            return [data]

        if environ.get("REQUEST_METHOD") != "POST":
            return answer("405 Method Not Allowed", {"error": "POST only"})
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return answer("400 Bad Request", {"error": "bad Content-Length"})
        if length > max_body:
            return answer("413 Content Too Large", {"error": "body too large"})
        body = environ["wsgi.input"].read(length)
        headers = {k[5:].replace("_", "-"): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
        try:
            report = ingest_events(ledger, body, headers, public_key=key)
        except WebhookSignatureError as error:
            return answer("403 Forbidden", {"error": error.code})
        except MalformedWebhook as error:
            return answer("400 Bad Request", {"error": error.code})
        return answer("200 OK", asdict(report))

    return app
