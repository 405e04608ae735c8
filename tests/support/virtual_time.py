"""An asyncio event loop on a virtual clock, for unit tests of timing.

The loop never sleeps: whenever it would wait for its next timer, the clock jumps to that
timer instead. Timers still fire in order and at their exact times, so a test can assert
that a token was released at 100 ms after its start, to the microsecond, in no real time.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from vllm_sim.engine.clock import TimerHandle

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; where the loop would block, moves the clock forward."""

    def __init__(self, advance: Callable[[float], None]) -> None:
        super().__init__()
        self._advance = advance

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if events:
            return events
        if timeout is None:
            raise RuntimeError("deadlock: the loop waits with no timer and no I/O")
        self._advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(_JumpingSelector(self.advance))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Moves the clock on, as a stalled loop would find it when it next looks."""
        self._now += max(seconds, 0.0)


class LoopClockScheduler:
    """The engine's Scheduler on the running loop's own clock (virtual in these tests)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_at(when, callback)

    @staticmethod
    def at(monotonic: float) -> float:
        return monotonic


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()


def virtual_now() -> float:
    return asyncio.get_running_loop().time()
