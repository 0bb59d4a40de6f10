"""An exception raised into a thread anywhere in the running-calls bookkeeping (Dramatiq's time limit, a signal
handler's exception) leaves no lock held: the ledger's other calls and ``close()`` go on.

The bookkeeping used a ``threading.Condition``, whose ``__enter__`` and ``__exit__`` are Python code: an
interruption landing just after it acquired its lock left that lock held, and every other call of the ledger,
and ``close()``, then waited for good (the interruption review, 2026-12-01). Here the interruption is raised,
in turn, at every place in the bookkeeping where CPython 3.11 delivers one: a function's start and the
instruction after a call returns (backward jumps, the third kind, it has none).
"""

from __future__ import annotations

import dis
import itertools
import sys
import threading
import time
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from safe_effects import EffectRequest, Ledger
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

from ._time_limits import Interruption

REQUEST = EffectRequest(operation="charge", params={"amount": 500})
_BOOKKEEPING = "_running_calls.py"


def _in_bookkeeping(frame: FrameType) -> bool:
    """A frame of the running-calls module, or of the threading module called straight from it."""
    if frame.f_code.co_filename.endswith(_BOOKKEEPING):
        return True
    caller = frame.f_back
    return frame.f_code.co_filename.endswith("threading.py") and caller is not None and _in_bookkeeping(caller)


@cache
def _after_calls(code: CodeType) -> frozenset[int]:
    """Offsets of the instructions that follow a call: where an asynchronous exception lands once it returns."""
    instructions = list(dis.get_instructions(code))
    return frozenset(b.offset for a, b in itertools.pairwise(instructions) if a.opname == "CALL")


def _interrupted_at(nth: int, call: Callable[[], Any]) -> bool:
    """Run ``call`` with Interruption raised at its ``nth`` interruptible point in the bookkeeping; whether
    it was."""
    seen = 0

    def hit(frame: FrameType) -> None:
        nonlocal seen
        seen += 1
        if seen == nth:
            sys.settrace(None)
            raise Interruption(f"{frame.f_code.co_filename}:{frame.f_lineno}")

    def per_instruction(frame: FrameType, event: str, arg: object) -> Any:
        if event == "opcode" and frame.f_lasti in _after_calls(frame.f_code):
            hit(frame)
        return per_instruction

    def per_call(frame: FrameType, event: str, arg: object) -> Any:
        if not _in_bookkeeping(frame):
            return None
        hit(frame)  # the function's start
        frame.f_trace_opcodes = True
        return per_instruction

    sys.settrace(per_call)
    try:
        call()
    except Interruption:
        return True
    finally:
        sys.settrace(None)
    return False


def test_an_interruption_anywhere_in_the_bookkeeping_leaves_the_ledger_usable(tmp_path: Path) -> None:
    fake = GenericFakeProvider(tmp_path / "fake.db")
    adapter = GenericFakeAdapter(fake)
    nth, interrupted = 0, 0
    while True:
        nth += 1
        ledger = Ledger.open(f"sqlite:///{tmp_path / f'ledger-{nth}.db'}")
        first = partial(ledger.execute, adapter, REQUEST, intent_key="order:o_1:pay:v1")
        if not _interrupted_at(nth, first):
            ledger.close()
            break  # past the last point: every one was tried
        interrupted += 1
        second = {"intent_key": "order:o_2:pay:v1"}
        other = threading.Thread(target=ledger.execute, args=(adapter, REQUEST), kwargs=second)
        other.start()
        other.join(timeout=5)
        assert not other.is_alive(), f"point {nth}: another thread's call is blocked"
        began = time.monotonic()
        closing = threading.Thread(target=ledger.close, kwargs={"wait": 0.5})
        closing.start()
        closing.join(timeout=5)
        assert not closing.is_alive(), f"point {nth}: close() is blocked"
        assert time.monotonic() - began < 2.0
    assert interrupted > 10  # the bookkeeping was really walked through
