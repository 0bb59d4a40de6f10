"""A tiny WSGI endpoint for SendGrid's Event Webhook around :func:`ingest_events`."""

from __future__ import annotations

from collections.abc import Iterable
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from safe_effects import Ledger

from ._endpoint import MAX_BODY, NO_LENGTH, NOT_POST, Answer, answer_events, declared_length, read_to_eof
from ._signature import PublicKey, load_public_key


def make_wsgi_app(ledger: Ledger, *, public_key: str | PublicKey | None, max_body: int = MAX_BODY) -> WSGIApplication:
    """POST: 200 + counts, 403 bad signature, 400 not an event array, 413 too big, 405 other methods, 411 a body
    of unknown length its server did not terminate."""
    key = load_public_key(public_key) if public_key is not None else None

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        answer = _answer(environ)
        body = answer.body
        start_response(answer.status_line, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def _answer(environ: WSGIEnvironment) -> Answer:
        if environ.get("REQUEST_METHOD") != "POST":
            return NOT_POST
        length = declared_length(environ.get("CONTENT_LENGTH"), max_body)
        if isinstance(length, Answer):
            return length
        if environ.get("CONTENT_LENGTH"):
            body = environ["wsgi.input"].read(length)
        elif environ.get("wsgi.input_terminated"):
            # a chunked body: PEP 3333 lets a server pass one without a length only if it ends the input itself
            body = read_to_eof(environ["wsgi.input"], max_body)
            if isinstance(body, Answer):
                return body
        else:  # reading on may block forever; an empty body would fail the signature, blaming the sender
            return NO_LENGTH
        headers = {k[5:].replace("_", "-"): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
        return answer_events(ledger, body, headers, key)

    return app
