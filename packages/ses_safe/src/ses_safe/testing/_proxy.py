"""A fault-injecting HTTP proxy in front of a moto server: moto keeps the SES state, the proxy breaks the wire."""

from __future__ import annotations

import http.client
import threading
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from safe_effects.testing import Exchange, FakeHTTPServer, FakeRequest, FakeResponse, Fault

V1_SEND_ACTIONS = frozenset({"SendEmail", "SendRawEmail", "SendTemplatedEmail"})
V2_SEND_PATH = "/v2/email/outbound-emails"
_SETS_PATH, _DESTINATIONS = "/v2/email/configuration-sets/", "/event-destinations"
# hop-by-hop headers, plus the ones the proxy's own HTTP server writes (no duplicate Date/Server lines)
_NOT_FORWARDED = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "date", "server"}
)


def is_send(request: FakeRequest) -> bool:
    """A v1 SendEmail/SendRawEmail/SendTemplatedEmail (query protocol) or a v2 SendEmail (REST): the calls
    that commit an email."""
    if request.method != "POST":
        return False
    if request.path == V2_SEND_PATH:
        return True
    action = parse_qs(request.body.decode("utf-8", "replace")).get("Action", [""])[0]
    return action in V1_SEND_ACTIONS


def _refusal(request: FakeRequest, code: str, status: int, message: str) -> FakeResponse:
    """An error in the wire format of the protocol the request used (XML for v1, JSON for v2)."""
    if request.path == V2_SEND_PATH:
        return FakeResponse.json(status, {"message": message}, headers={"x-amzn-ErrorType": code})
    body = (
        '<ErrorResponse xmlns="http://ses.amazonaws.com/doc/2010-12-01/"><Error><Type>Sender</Type>'
        f"<Code>{code}</Code><Message>{message}</Message></Error><RequestId>{uuid.uuid4()}</RequestId>"
        "</ErrorResponse>"
    )
    return FakeResponse(status, body.encode(), {"Content-Type": "text/xml"})


class MotoFaultProxy:
    """Forwards every request to ``upstream`` (a moto server); a send moto accepted counts as committed."""

    def __init__(self, upstream: str, *, timeout: float = 30.0) -> None:
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._timeout = timeout
        self._lock = threading.Lock()
        self._refusals: deque[tuple[str, int, str]] = deque()
        self._arrived: list[FakeRequest] = []
        self._destinations: dict[str, FakeResponse] = {}  # GetConfigurationSetEventDestinations, by set
        self.server = FakeHTTPServer(self._handle)
        self.server.on_received(self._arrive)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> MotoFaultProxy:
        self.server.start()
        return self

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> MotoFaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inject(self, fault: Fault) -> None:
        """A transport fault from ``safe_effects.testing.Fault`` (drop, delay, status...)."""
        self.server.inject(fault)

    def refuse_sends(self, code: str, *, status: int = 400, message: str = "refused", times: int = 1) -> None:
        """Answer the next ``times`` sends with SES error ``code`` without forwarding them (nothing is sent)."""
        with self._lock:
            self._refusals.extend([(code, status, message)] * times)

    def pending_faults(self) -> list[object]:
        """What a test set up that has not fired yet: the server's faults and the refusals of
        :meth:`refuse_sends` (the pytest plugin's teardown check reads this)."""
        with self._lock:
            refusals = [f"refuse_sends({code!r}, status={status})" for code, status, _ in self._refusals]
        return [*self.server.pending_faults(), *refusals]

    def set_event_destinations(self, configuration_set: str, destinations: list[Mapping[str, Any]]) -> None:
        """What SESv2's GetConfigurationSetEventDestinations answers for ``configuration_set`` (its API's
        shape: ``Name``, ``Enabled``, ``MatchingEventTypes``, ``SnsDestination`` ...): moto has no such call.
        A set never given here is answered NotFoundException, as SES answers a set that does not exist."""
        answer = FakeResponse.json(200, {"EventDestinations": [dict(d) for d in destinations]})
        with self._lock:
            self._destinations[configuration_set] = answer

    def refuse_event_destinations(self, configuration_set: str, code: str, *, status: int = 400) -> None:
        """Answer SESv2's GetConfigurationSetEventDestinations for ``configuration_set`` with error ``code``
        (``AccessDeniedException``, status 403, for a role without the right)."""
        answer = FakeResponse.json(status, {"message": "refused"}, headers={"x-amzn-ErrorType": code})
        with self._lock:
            self._destinations[configuration_set] = answer

    @property
    def exchanges(self) -> list[Exchange]:
        return self.server.exchanges

    def sends(self) -> list[FakeRequest]:
        """Every send that reached the proxy, counted on arrival (a delayed one is not finished yet)."""
        with self._lock:
            return list(self._arrived)

    def _arrive(self, request: FakeRequest) -> None:
        if is_send(request):
            with self._lock:
                self._arrived.append(request)

    def _take_refusal(self, request: FakeRequest) -> tuple[str, int, str] | None:
        with self._lock:
            return self._refusals.popleft() if self._refusals and is_send(request) else None

    def _handle(self, request: FakeRequest) -> FakeResponse:
        if request.method == "GET" and request.path.startswith(_SETS_PATH) and request.path.endswith(_DESTINATIONS):
            return self._event_destinations(unquote(request.path[len(_SETS_PATH) : -len(_DESTINATIONS)]))
        refusal = self._take_refusal(request)
        if refusal is not None:
            return _refusal(request, *refusal)
        status, body, headers = self._forward(request)
        return FakeResponse(status, body, headers, committed=is_send(request) and 200 <= status < 300)

    def _event_destinations(self, configuration_set: str) -> FakeResponse:
        with self._lock:
            answer = self._destinations.get(configuration_set)
        if answer is None:
            missing = {"message": f"Configuration set <{configuration_set}> does not exist."}
            return FakeResponse.json(404, missing, headers={"x-amzn-ErrorType": "NotFoundException"})
        return answer

    def _forward(self, request: FakeRequest) -> tuple[int, bytes, dict[str, str]]:
        target = request.path + (f"?{urlencode(request.query, doseq=True)}" if request.query else "")
        headers: dict[str, Any] = {k: v for k, v in request.headers.items() if k not in _NOT_FORWARDED}
        connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            connection.request(request.method, target, body=request.body, headers=headers)
            answer = connection.getresponse()
            body = answer.read()
            kept = {k: v for k, v in answer.getheaders() if k.lower() not in _NOT_FORWARDED}
            return answer.status, body, kept
        finally:
            connection.close()
