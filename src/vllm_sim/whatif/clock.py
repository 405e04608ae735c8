"""A virtual clock for discrete-event runs: time jumps from one event to the next.

It is the engine's Scheduler (engine/clock.py) with no event loop behind it: `call_at`
queues a callback, and `run` pops callbacks in time order (ties in the order they were
queued), setting the clock to each one's time first. Nothing waits in real time, so a run
goes as fast as the callbacks themselves.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


class VirtualTimer:
    """A queued callback; cancelling it makes the run skip it."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None] | None) -> None:
        self.callback = callback

    def cancel(self) -> None:
        self.callback = None


class VirtualClock:
    """Simulated seconds from 0, advanced only by `run`."""

    __slots__ = ("_heap", "_next", "_now", "stopped")

    def __init__(self) -> None:
        self._now = 0.0
        self.stopped = False  # set by `stop`: `run` returns after the callback running
        self._heap: list[tuple[float, int, VirtualTimer]] = []
        self._next = 0  # tie-break: callbacks due together run in the order queued

    def now(self) -> float:
        return self._now

    def at(self, monotonic: float) -> float:
        # Requests are submitted by the run itself: their receipt is the current time.
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> VirtualTimer:
        timer = VirtualTimer(callback)
        self._next += 1
        heapq.heappush(self._heap, (max(when, self._now), self._next, timer))
        return timer

    @property
    def pending(self) -> int:
        """Callbacks queued (cancelled ones included until their time comes)."""
        return len(self._heap)

    def stop(self) -> None:
        """Makes `run` return after the callback now running (safe from a signal handler:
        it only sets a flag); the callbacks left stay queued."""
        self.stopped = True

    def run(self) -> None:
        """Runs every callback, those queued meanwhile included, until none is left or
        `stop` is called."""
        heap = self._heap
        pop = heapq.heappop
        while heap and not self.stopped:
            when, _, timer = pop(heap)
            callback = timer.callback
            if callback is None:
                continue
            timer.callback = None
            self._now = when
            callback()
