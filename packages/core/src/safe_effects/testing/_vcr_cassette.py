"""vcrpy's Cassette playing through a :class:`CassetteReplay`; imported only once vcrpy is known to be installed."""

from __future__ import annotations

import copy
import threading
from typing import Any

from vcr.cassette import Cassette

from ._cassettes import CassetteReplay, ReplayCall, Response


def _body(request: Any) -> bytes:
    body = request.body
    if hasattr(body, "read"):
        body = body.read()
    return body.encode() if isinstance(body, str) else bytes(body or b"")


class FaultInjectingCassette(Cassette):  # type: ignore[misc]  # vcrpy ships no type hints
    """Plays faults, counts effects, and answers a repeated idempotency key like the provider would."""

    replay: CassetteReplay  # set by fault_cassette right after loading, before any request

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._replay_lock = threading.Lock()

    def _call(self, request: Any) -> ReplayCall:
        header = self.replay.idempotency_header
        key = request.headers.get(header) if header else None
        return ReplayCall(str(request.method), str(request.path), str(key) if key else None, _body(request))

    def can_play_response_for(self, request: Any) -> bool:
        if super().can_play_response_for(request):
            return True
        return bool(self.rewound) and self.replay.remembers(self._call(request))

    def play_response(self, request: Any) -> Response:
        call = self._call(request)
        with self._replay_lock:
            if request not in self:  # every matching interaction was played already
                if self.replay.remembers(call):
                    return copy.deepcopy(self.replay.answer_again(call))
                return super().play_response(request)  # type: ignore[no-any-return]  # vcrpy's own "not recorded" error
            before = dict(self.play_counts)
            recorded = super().play_response(request)
            index = next(i for i, n in self.play_counts.items() if n != before.get(i, 0))
            fault = self.replay.fault_at(index)
            if fault is not None and not fault.provider_acted:
                self.play_counts[index] -= 1  # the provider never saw it: the interaction stays for the retry
        return self.replay.play(index, call, recorded)
