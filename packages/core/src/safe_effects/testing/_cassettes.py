"""Replay a vcrpy cassette with chosen interactions turned into faults, counting what the provider would have done.

A user records real provider calls once (``record_mode="once"``); replays then run without a network, and
``faults={index: ...}`` turns interaction ``index`` (0-based, in file order) into a fault the first time it is
requested. The replay keeps the provider's side of the story: a write the provider acted on counts one effect
(a lost or late answer included), a refused one (429, 500 before acting, a request lost on the way) none and
leaves the interaction for the retry, and a repeated ``Idempotency-Key`` gets the first answer again without
a new effect, as a deduping provider would answer it.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from http import HTTPStatus
from typing import Any

from safe_effects._errors import MissingDependency

Response = dict[str, Any]  # vcrpy's recorded response: {"status": {...}, "headers": {...}, "body": {"string": ...}}
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SECRET_HEADERS = ("authorization", "x-amz-security-token")  # never written into a cassette
_DEFAULT_ERROR = b'{"error": {"type": "api_error", "message": "injected by a safe-effects fault cassette"}}'


class ReplayFaultKind(StrEnum):
    RESPONSE_LOST = "response_lost"  # the provider acted; the connection closed before the answer came back
    REQUEST_LOST = "request_lost"  # the connection closed before the provider acted: same symptom, no effect
    TIMEOUT = "timeout"  # the provider acted; the client's read timed out
    DELAY = "delay"  # the provider acted; the answer comes ``seconds`` late
    STATUS = "status"  # an error status instead of the recorded answer; the provider did nothing


@dataclass(frozen=True, slots=True)
class ReplayFault:
    """What one interaction does instead of answering as recorded."""

    kind: ReplayFaultKind
    status: int = 0
    seconds: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def response_lost(cls) -> ReplayFault:
        return cls(ReplayFaultKind.RESPONSE_LOST)

    @classmethod
    def request_lost(cls) -> ReplayFault:
        return cls(ReplayFaultKind.REQUEST_LOST)

    @classmethod
    def timeout(cls) -> ReplayFault:
        return cls(ReplayFaultKind.TIMEOUT)

    @classmethod
    def delay(cls, seconds: float) -> ReplayFault:
        return cls(ReplayFaultKind.DELAY, seconds=seconds)

    @classmethod
    def status_code(
        cls, status: int, *, headers: Mapping[str, str] | None = None, body: bytes | None = None
    ) -> ReplayFault:
        """The default body is JSON the Stripe and SendGrid SDKs read; AWS needs its error header or XML body."""
        merged = {"Content-Type": "application/json", **(headers or {})}
        return cls(ReplayFaultKind.STATUS, status=status, headers=merged, body=_DEFAULT_ERROR if body is None else body)

    @classmethod
    def parse(cls, spec: ReplayFault | str | int) -> ReplayFault:
        """``"response_lost"``, ``"request_lost"``, ``"timeout"``, or a status such as ``"429"`` or ``429``."""
        if isinstance(spec, ReplayFault):
            return spec
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls.status_code(spec)
        if not isinstance(spec, str):
            raise TypeError(f"a cassette fault is a name, a status or a ReplayFault, not {type(spec).__name__}")
        if spec.isdigit():
            return cls.status_code(int(spec))
        simple = {"response_lost": cls.response_lost, "request_lost": cls.request_lost, "timeout": cls.timeout}
        if spec not in simple:
            raise ValueError(
                f"unknown cassette fault {spec!r}: use {', '.join(simple)}, a status like '429', or ReplayFault"
            )
        return simple[spec]()

    @property
    def provider_acted(self) -> bool:
        return self.kind in (ReplayFaultKind.RESPONSE_LOST, ReplayFaultKind.TIMEOUT, ReplayFaultKind.DELAY)

    def answer(self, recorded: Response) -> Response:
        """What the client gets instead of ``recorded``: a transport error raised, a late answer or a made-up one."""
        if self.kind in (ReplayFaultKind.RESPONSE_LOST, ReplayFaultKind.REQUEST_LOST):
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        if self.kind is ReplayFaultKind.TIMEOUT:
            raise TimeoutError("timed out")
        if self.kind is ReplayFaultKind.DELAY:
            time.sleep(self.seconds)
            return recorded
        try:
            reason = HTTPStatus(self.status).phrase
        except ValueError:
            reason = "Injected"
        headers = {name: [value] for name, value in self.headers.items()}
        return {"status": {"code": self.status, "message": reason}, "headers": headers, "body": {"string": self.body}}


@dataclass(frozen=True, slots=True)
class ReplayCall:
    """One request as the replay sees it."""

    method: str
    path: str
    idempotency_key: str | None
    body: bytes


@dataclass(frozen=True, slots=True)
class ReplayedRequest:
    """One request the replay served, with what the provider would have done about it."""

    method: str
    path: str
    interaction: int
    fault: ReplayFaultKind | None
    effect: bool
    idempotent_replay: bool = False


EffectRule = Callable[[ReplayCall, int], bool]


def write_succeeded(call: ReplayCall, status: int) -> bool:
    """The default effect rule: a 2xx answer to a write method (RPC-style APIs need their own rule)."""
    return call.method in _WRITES and 200 <= status < 300


class CassetteReplay:
    """The provider's side of a replay: requests served, effects it would have made, faults not fired yet."""

    def __init__(
        self,
        path: str,
        interactions: Sequence[tuple[str, str]],
        faults: Mapping[int, ReplayFault | str | int],
        *,
        idempotency_header: str | None,
        effect: EffectRule,
    ) -> None:
        for index in faults:
            if not 0 <= index < len(interactions):
                raise ValueError(
                    f"cassette {path} has {len(interactions)} interaction(s), numbered from 0: no interaction {index}"
                )
        self.path = path
        self.idempotency_header = idempotency_header
        self._interactions = list(interactions)
        self._faults = {index: ReplayFault.parse(spec) for index, spec in faults.items()}
        self._effect = effect
        self._saved: dict[str, tuple[bytes, int, Response]] = {}  # idempotency key -> first body and answer
        self._log: list[ReplayedRequest] = []
        self._lock = threading.Lock()

    @property
    def provider_effects(self) -> int:
        with self._lock:
            return sum(r.effect for r in self._log)

    def requests(self, method: str | None = None, path_prefix: str = "/") -> list[ReplayedRequest]:
        with self._lock:
            return [r for r in self._log if method in (None, r.method) and r.path.startswith(path_prefix)]

    def unfired(self) -> list[str]:
        with self._lock:
            return [
                f"interaction {index} ({' '.join(self._interactions[index])}): {fault.kind.value}"
                for index, fault in sorted(self._faults.items())
            ]

    def fault_at(self, index: int) -> ReplayFault | None:
        with self._lock:
            return self._faults.get(index)

    def play(self, index: int, call: ReplayCall, recorded: Response) -> Response:
        """Serve interaction ``index``: the recorded answer, or its fault (which fires once)."""
        status = int(recorded["status"]["code"])
        with self._lock:
            fault = self._faults.pop(index, None)
            acted = fault is None or fault.provider_acted
            key = call.idempotency_key
            effect = acted and (key is None or key not in self._saved) and self._effect(call, status)
            if acted and key is not None:
                self._saved.setdefault(key, (call.body, index, recorded))
            self._log.append(ReplayedRequest(call.method, call.path, index, fault.kind if fault else None, effect))
        return recorded if fault is None else fault.answer(recorded)

    def remembers(self, call: ReplayCall) -> bool:
        """Would a deduping provider answer ``call`` from a key it already acted on (same key, same body)?"""
        with self._lock:
            saved = self._saved.get(call.idempotency_key) if call.idempotency_key is not None else None
            return saved is not None and saved[0] == call.body

    def answer_again(self, call: ReplayCall) -> Response:
        """The first answer for the call's idempotency key: no new effect."""
        assert call.idempotency_key is not None  # callers check remembers() first
        with self._lock:
            _, index, recorded = self._saved[call.idempotency_key]
            self._log.append(ReplayedRequest(call.method, call.path, index, None, False, idempotent_replay=True))
        return recorded


def _with_secret_headers(given: Sequence[str | tuple[str, Any]]) -> list[str | tuple[str, Any]]:
    """The user's ``filter_headers`` (names, or vcrpy's ``(name, replacement)``) plus every secret header."""
    named = {(entry if isinstance(entry, str) else entry[0]).lower() for entry in given}
    return [*given, *(secret for secret in _SECRET_HEADERS if secret not in named)]


@contextmanager
def fault_cassette(
    path: str | os.PathLike[str],
    *,
    faults: Mapping[int, ReplayFault | str | int] | None = None,
    record_mode: str = "once",
    idempotency_header: str | None = "Idempotency-Key",
    effect: EffectRule = write_succeeded,
    **vcr_options: Any,
) -> Iterator[CassetteReplay]:
    """Use the vcrpy cassette at ``path`` (recording it when absent) with ``faults`` played on replay.

    ``vcr_options`` go to ``vcr.VCR`` (``match_on``, ``before_record_request``...); credential headers
    (``authorization``, ``x-amz-security-token``) are always filtered out of recordings, in addition to any
    ``filter_headers`` given.
    """
    try:
        import vcr  # noqa: PLC0415  # optional extra, imported only when a cassette is used
    except ImportError as error:
        raise MissingDependency("vcrpy", "testing") from error
    from ._vcr_cassette import FaultInjectingCassette  # noqa: PLC0415  # subclasses vcrpy's Cassette

    vcr_options["filter_headers"] = _with_secret_headers(vcr_options.get("filter_headers", ()))
    config = vcr.VCR(record_mode=record_mode, **vcr_options).get_merged_config(path=os.fspath(path))
    with FaultInjectingCassette.use(**config) as cassette:
        if faults and not cassette.rewound:
            raise FileNotFoundError(f"cassette {os.fspath(path)} is not recorded yet: record it once without faults")
        interactions = [(str(r.method), str(r.path)) for r in cassette.requests]
        replay = CassetteReplay(
            os.fspath(path), interactions, faults or {}, idempotency_header=idempotency_header, effect=effect
        )
        cassette.replay = replay
        yield replay
