"""A real HTTP server on 127.0.0.1 that provider fakes build on: records every request, injects faults.

A provider fake supplies one ``handler(FakeRequest) -> FakeResponse`` holding its rules and state (moto's
split: state and rules in the handler, wire and faults here). Faults are queued and matched by method and
path prefix; each fires ``times`` times and counts how often it did (``Fault.times_fired``). Hooks fire when
a request arrives and when it committed an effect, so a test can SIGKILL a worker at exactly those moments.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True, slots=True)
class FakeRequest:
    seq: int
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # lower-cased names
    body: bytes
    received_at: float  # time.monotonic()

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)


@dataclass(frozen=True, slots=True)
class FakeResponse:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    committed: bool = False  # did handling this request cause a provider-side effect?

    @classmethod
    def json(
        cls, status: int, payload: Any, *, headers: Mapping[str, str] | None = None, committed: bool = False
    ) -> FakeResponse:
        merged = {"Content-Type": "application/json", **(headers or {})}
        return cls(status, json.dumps(payload).encode(), merged, committed)


class FaultKind(StrEnum):
    STATUS = "status"  # answer with an error status; the handler never runs, nothing is committed
    DROP_BEFORE_COMMIT = "drop_before_commit"  # close the connection; the handler never runs
    DROP_AFTER_COMMIT = "drop_after_commit"  # handler runs (effect committed), connection closed unanswered
    RESET_AFTER_COMMIT = "reset_after_commit"  # handler runs, then a TCP reset: "connection reset by peer"
    DELAY = "delay"  # handler runs, the answer waits ``seconds`` (past the client's read timeout)
    CUT_BODY = "cut_body"  # handler runs, status and headers are sent with half the body, then close
    STATUS_AFTER_COMMIT = "status_after_commit"  # handler runs, then an error status is answered


_AFTER_HANDLER = frozenset(
    {
        FaultKind.DROP_AFTER_COMMIT,
        FaultKind.RESET_AFTER_COMMIT,
        FaultKind.DELAY,
        FaultKind.CUT_BODY,
        FaultKind.STATUS_AFTER_COMMIT,
    }
)


class _Firings:
    """How often a fault fired: kept by the fault itself, so clearing a queue never makes it look fired."""

    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def add(self) -> None:
        with self.lock:
            self.count += 1


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    status: int = 500
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    times: int = 1
    method: str | None = "POST"
    path_prefix: str = "/"
    # only a request the handler committed (an effect) fires it; others pass untouched and leave it queued
    committed_only: bool = False
    _firings: _Firings = field(default_factory=_Firings, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.committed_only and self.kind not in _AFTER_HANDLER:
            raise ValueError(f"committed_only needs a fault that lets the handler run, not {self.kind.value}")

    @property
    def times_fired(self) -> int:
        """How many requests this fault has fired on (a queue cleared by ``reset()`` does not change it)."""
        return self._firings.count

    @classmethod
    def status_code(
        cls, status: int, *, body: Any = None, headers: Mapping[str, str] | None = None, **match: Any
    ) -> Fault:
        return cls(FaultKind.STATUS, status=status, body=body, headers=headers or {}, **match)

    @classmethod
    def drop_after_commit(cls, **match: Any) -> Fault:
        return cls(FaultKind.DROP_AFTER_COMMIT, **match)

    @classmethod
    def reset_after_commit(cls, **match: Any) -> Fault:
        return cls(FaultKind.RESET_AFTER_COMMIT, **match)

    @classmethod
    def drop_before_commit(cls, **match: Any) -> Fault:
        return cls(FaultKind.DROP_BEFORE_COMMIT, **match)

    @classmethod
    def delay(cls, seconds: float, **match: Any) -> Fault:
        return cls(FaultKind.DELAY, seconds=seconds, **match)

    @classmethod
    def cut_body(cls, **match: Any) -> Fault:
        return cls(FaultKind.CUT_BODY, **match)

    @classmethod
    def status_after_commit(cls, status: int, *, body: Any = None, **match: Any) -> Fault:
        return cls(FaultKind.STATUS_AFTER_COMMIT, status=status, body=body, **match)

    def matches(self, request: FakeRequest) -> bool:
        return (self.method is None or self.method == request.method) and request.path.startswith(self.path_prefix)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request as the fake saw it, with what it did about it."""

    request: FakeRequest
    status: int | None  # None when the connection was dropped unanswered
    fault: FaultKind | None
    committed: bool


Hook = Callable[[FakeRequest], None]
Handler = Callable[[FakeRequest], FakeResponse]


class FakeHTTPServer:
    """Serve ``handler`` on 127.0.0.1 with recording, fault injection and arrival/commit hooks."""

    def __init__(self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._handler = handler
        self._lock = threading.Lock()
        self._faults: list[list[Any]] = []  # [fault, remaining]
        self._exchanges: list[Exchange] = []
        self._arrivals: list[FakeRequest] = []  # logged on arrival, before any delay or fault
        self._on_received: list[Hook] = []
        self._on_committed: list[Hook] = []
        self._closing = threading.Event()
        self._seq = 0
        self._httpd = _QuietServer((host, port), _make_handler_class(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address to point an SDK at, once serving: before ``start()`` the port accepts connections but
        nothing answers, so a client would wait out its read timeout and record an unknown outcome."""
        if self._thread is None:
            raise RuntimeError("the fake is not serving yet: call .start() first, or use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeHTTPServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-http", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeHTTPServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inject(self, fault: Fault) -> None:
        """Queue a fault; the first queued fault that matches a request fires."""
        with self._lock:
            self._faults.append([fault, fault.times])

    def reset(self) -> None:
        """Forget faults, exchanges and arrivals, so one running server can serve many tests."""
        with self._lock:
            self._faults.clear()
            self._exchanges.clear()
            self._arrivals.clear()

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def remove_fault(self, fault: Fault) -> None:
        """Take ``fault`` (this very object) out of the queue, whether or not it fired."""
        with self._lock:
            self._faults[:] = [entry for entry in self._faults if entry[0] is not fault]

    def pending_faults(self) -> list[Fault]:
        """Faults that have not fired (yet): a test can assert it used every fault it set up."""
        with self._lock:
            return [f for f, _ in self._faults]

    def on_received(self, hook: Hook) -> None:
        self._on_received.append(hook)

    def on_committed(self, hook: Hook) -> None:
        self._on_committed.append(hook)

    def clear_hooks(self) -> None:
        self._on_received.clear()
        self._on_committed.clear()

    def remove_hook(self, hook: Hook) -> None:
        """Forget ``hook`` (arrival or commit), so a long-lived server does not keep a finished test's hooks."""
        for hooks in (self._on_received, self._on_committed):
            with contextlib.suppress(ValueError):
                hooks.remove(hook)

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def requests(self, method: str | None = None, path_prefix: str = "/") -> list[FakeRequest]:
        """Every request that arrived (even one still waiting on a delay fault), in arrival order."""
        with self._lock:
            arrived = list(self._arrivals)
        return [r for r in arrived if (method is None or r.method == method) and r.path.startswith(path_prefix)]

    # -- used by the request handler thread -------------------------------------------------------------

    def _arrive(self, **fields: Any) -> FakeRequest:
        with self._lock:
            self._seq += 1
            request = FakeRequest(seq=self._seq, **fields)
            self._arrivals.append(request)
            return request

    def _take_fault(self, request: FakeRequest, *, committed: bool = False) -> Fault | None:
        """The first queued fault matching ``request``; ``committed``: only faults waiting for a commit."""
        with self._lock:
            for entry in self._faults:
                fault: Fault = entry[0]
                if fault.committed_only is committed and fault.matches(request):
                    if entry[1] <= 1:
                        self._faults.remove(entry)
                    else:
                        entry[1] -= 1
                    fault._firings.add()
                    return fault
        return None

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _serve(self, request: FakeRequest) -> tuple[Fault | None, FakeResponse | None]:
        """Apply faults around the handler. Returns the fault and the response to write (None: drop)."""
        for hook in list(self._on_received):
            hook(request)
        fault = self._take_fault(request)
        if fault is not None and fault.kind is FaultKind.STATUS:
            response = _fault_response(fault)
            self._record(Exchange(request, fault.status, fault.kind, committed=False))
            return fault, response
        if fault is not None and fault.kind is FaultKind.DROP_BEFORE_COMMIT:
            self._record(Exchange(request, None, fault.kind, committed=False))
            return fault, None
        response = self._handler(request)
        if response.committed:
            for hook in list(self._on_committed):
                hook(request)
            if fault is None:
                fault = self._take_fault(request, committed=True)
        if fault is None:
            self._record(Exchange(request, response.status, None, response.committed))
            return None, response
        if fault.kind in (FaultKind.DROP_AFTER_COMMIT, FaultKind.RESET_AFTER_COMMIT):
            self._record(Exchange(request, None, fault.kind, response.committed))
            return fault, None
        if fault.kind is FaultKind.STATUS_AFTER_COMMIT:
            self._record(Exchange(request, fault.status, fault.kind, response.committed))
            return fault, _fault_response(fault)
        if fault.kind is FaultKind.DELAY:
            self._closing.wait(fault.seconds)
        self._record(Exchange(request, response.status, fault.kind, response.committed))
        return fault, response


class _QuietServer(ThreadingHTTPServer):
    """A client that vanishes (a killed worker, a dropped keep-alive) is part of the test, not an error."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._resets: set[socket.socket] = set()
        self._resets_lock = threading.Lock()

    def reset_when_closed(self, connection: socket.socket) -> None:
        """Close ``connection`` with a TCP reset instead of the usual FIN."""
        with self._resets_lock:
            self._resets.add(connection)

    def shutdown_request(self, request: Any) -> None:
        with self._resets_lock:
            reset = request in self._resets
            self._resets.discard(request)
        if not reset:
            super().shutdown_request(request)
            return
        # no shutdown(SHUT_WR) first (it would send a FIN the client reads as a clean close): linger 0, close
        with contextlib.suppress(OSError):
            request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _fault_response(fault: Fault) -> FakeResponse:
    """Bytes bodies go out as they are (XML errors, say); anything else as JSON."""
    if isinstance(fault.body, bytes):
        return FakeResponse(fault.status, fault.body, dict(fault.headers))
    return FakeResponse.json(fault.status, fault.body or {"error": "injected"}, headers=fault.headers)


def _make_handler_class(server: FakeHTTPServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the exchange log is the record."""

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = server._arrive(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                received_at=time.monotonic(),
            )
            fault, response = server._serve(request)
            try:
                if response is None:
                    self._drop(reset=fault is not None and fault.kind is FaultKind.RESET_AFTER_COMMIT)
                    return
                cut = fault is not None and fault.kind is FaultKind.CUT_BODY
                self.send_response(response.status)
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                if cut:
                    self.wfile.write(response.body[: len(response.body) // 2])
                    self.wfile.flush()
                    self._drop()
                    return
                self.wfile.write(response.body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _drop(self, *, reset: bool = False) -> None:
            self.close_connection = True
            if reset:
                assert isinstance(self.server, _QuietServer)
                self.server.reset_when_closed(self.connection)
                return
            with contextlib.suppress(OSError):  # the peer may have gone already
                self.connection.shutdown(socket.SHUT_RDWR)

        do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

    return _Handler
