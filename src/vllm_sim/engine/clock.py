"""Where the engine reads the time and arms its token timer.

The engine never touches the event loop's clock directly: it is handed a Scheduler, so
the same code runs on the loop in the server and on a virtual clock in unit tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Runs `callback` once `now()` reaches `when`."""
        ...

    def at(self, monotonic: float) -> float:
        """A `time.monotonic()` reading (a request's receipt, say) on this clock."""
        ...


class LoopScheduler:
    """The running event loop's timers. Its clock is time.monotonic, which asyncio's (and
    uvloop's) loop time also follows, so deadlines read from now() can be armed as is."""

    __slots__ = ()

    now = staticmethod(time.monotonic)

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_at(when, callback)

    @staticmethod
    def at(monotonic: float) -> float:
        return monotonic


class ScaledScheduler:
    """Simulated time running `factor` times faster than the loop's (--time-scale): a
    deadline `d` simulated seconds away is armed `d / factor` real seconds away, and every
    time the engine reads or records is simulated time, so metrics and reported latencies
    are what a real-time run would show."""

    __slots__ = ("_factor", "_origin")

    def __init__(self, factor: float, origin: float | None = None) -> None:
        self._factor = factor
        self._origin = time.monotonic() if origin is None else origin

    def now(self) -> float:
        return self.at(time.monotonic())

    def at(self, monotonic: float) -> float:
        return self._origin + (monotonic - self._origin) * self._factor

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        real = self._origin + (when - self._origin) / self._factor
        return asyncio.get_running_loop().call_at(real, callback)
