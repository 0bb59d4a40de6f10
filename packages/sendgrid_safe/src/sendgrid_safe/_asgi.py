"""A tiny ASGI endpoint for SendGrid's Event Webhook: the WSGI endpoint's answers, for async servers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from safe_effects import Ledger

from ._endpoint import MAX_BODY, NOT_POST, TOO_LARGE, Answer, answer_events, declared_length
from ._signature import PublicKey, load_public_key

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

try:  # anyio runs the ledger's write in a thread of whichever event loop serves the app: asyncio or trio
    from anyio.to_thread import run_sync as _in_thread
except ImportError:  # no anyio (it comes with Starlette, FastAPI, httpx): asyncio's own
    _in_thread = asyncio.to_thread  # type: ignore[assignment]


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop (the ledger is the caller's), but servers that ask get their answers."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive, max_body: int) -> bytes | Answer | None:
    """The whole request body, TOO_LARGE as soon as it passes ``max_body``, None if the client went away."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:  # a chunked body declares no length: count what arrives
            return TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def make_asgi_app(ledger: Ledger, *, public_key: str | PublicKey | None, max_body: int = MAX_BODY) -> ASGIApp:
    """POST: 200 + counts, 403 bad signature, 400 not an event array, 413 too big, 405 other methods.

    The ledger's writes block (SQLite, psycopg), so each batch is ingested in a worker thread, never on the
    event loop.
    """
    key = load_public_key(public_key) if public_key is not None else None

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"the SendGrid webhook endpoint serves HTTP, not {scope['type']!r}")
        answer = await _answer(scope, receive)
        if answer is None:  # the client went away before its body arrived: nobody to answer
            return
        body = answer.body
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(scope: Scope, receive: Receive) -> Answer | None:
        if scope["method"] != "POST":
            return NOT_POST
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        length = declared_length(headers.get("content-length"), max_body)
        if isinstance(length, Answer):
            return length
        body = await _read_body(receive, max_body)
        if not isinstance(body, bytes):
            return body
        return await _in_thread(answer_events, ledger, body, headers, key)

    return app
