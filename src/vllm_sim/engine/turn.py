"""The engine's share of one turn of the event loop.

With no latency configured a whole request (n in the hundreds) would otherwise be
generated, and released, in one go, and nothing else (health checks, other clients) would
run meanwhile. A turn ends after WORK_PER_TURN tokens generated (~3 ms), or TURN_SECONDS of
real time (slow tool-call schemas); what is left waits for the next turn of the loop.
"""

from __future__ import annotations

import time

WORK_PER_TURN = 16384
TURN_SECONDS = 0.005


class Turn:
    """The work done in the current turn, and when its time is up.

    Loops that run once per sequence read `work` and `ends` inline rather than call
    `over()`, to cost nothing more than the comparison."""

    __slots__ = ("ends", "work")

    def __init__(self) -> None:
        self.work = 0  # tokens generated this turn
        self.ends = 0.0  # time.perf_counter() at which this turn is over

    def begin(self) -> None:
        self.work = 0
        self.ends = time.perf_counter() + TURN_SECONDS

    def over(self) -> bool:
        return self.work >= WORK_PER_TURN or time.perf_counter() >= self.ends
