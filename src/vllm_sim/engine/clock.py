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


class LoopScheduler:
    """The running event loop's timers. Its clock is time.monotonic, which asyncio's (and
    uvloop's) loop time also follows, so deadlines read from now() can be armed as is."""

    __slots__ = ()

    now = staticmethod(time.monotonic)

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_at(when, callback)
