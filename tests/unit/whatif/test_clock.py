"""The virtual clock of a replay: callbacks run in time order (ties in the order queued),
the clock reads each callback's own time while it runs, and nothing waits in real time."""

from __future__ import annotations

import time
from collections.abc import Callable

from vllm_sim.whatif.clock import VirtualClock


def recorder(clock: VirtualClock, log: list[tuple[str, float]], name: str) -> Callable[[], None]:
    """A callback that logs its name and the clock's reading when it runs."""

    def callback() -> None:
        log.append((name, clock.now()))

    return callback


def test_callbacks_run_in_time_order_and_read_their_own_time() -> None:
    """Queued out of order, callbacks run by time; `now()` inside each is its time."""
    clock = VirtualClock()
    log: list[tuple[str, float]] = []
    for name, when in (("c", 3.0), ("a", 1.0), ("d", 10.5), ("b", 2.25)):
        clock.call_at(when, recorder(clock, log, name))
    assert clock.now() == 0.0
    assert clock.pending == 4
    clock.run()
    assert log == [("a", 1.0), ("b", 2.25), ("c", 3.0), ("d", 10.5)]
    assert clock.now() == 10.5
    assert clock.pending == 0


def test_callbacks_due_together_run_in_the_order_queued() -> None:
    """Equal times keep the order of the call_at calls."""
    clock = VirtualClock()
    log: list[tuple[str, float]] = []
    for name in ("first", "second", "third", "fourth"):
        clock.call_at(5.0, recorder(clock, log, name))
    clock.call_at(1.0, recorder(clock, log, "early"))
    clock.run()
    assert [name for name, _ in log] == ["early", "first", "second", "third", "fourth"]


def test_a_cancelled_callback_is_skipped() -> None:
    """Cancel before its time: the run passes over it and the clock never takes its time."""
    clock = VirtualClock()
    log: list[tuple[str, float]] = []
    clock.call_at(1.0, recorder(clock, log, "kept"))
    dropped = clock.call_at(2.0, recorder(clock, log, "dropped"))
    clock.call_at(9.0, recorder(clock, log, "late")).cancel()
    dropped.cancel()
    clock.run()
    assert log == [("kept", 1.0)]
    assert clock.now() == 1.0


def test_a_callback_can_cancel_a_later_one() -> None:
    """A callback cancelling one due later (even at the same time) stops it."""
    clock = VirtualClock()
    log: list[tuple[str, float]] = []
    later = clock.call_at(4.0, recorder(clock, log, "later"))
    clock.call_at(4.0, recorder(clock, log, "tie"))

    def cancel_later() -> None:
        later.cancel()
        log.append(("cancel", clock.now()))

    clock.call_at(3.0, cancel_later)
    clock.run()
    assert log == [("cancel", 3.0), ("tie", 4.0)]


def test_a_callback_can_queue_more_and_they_run_in_the_same_run() -> None:
    """A chain of callbacks, each queuing the next, runs to its end in one `run()`; those
    queued meanwhile slot in by time among the ones already waiting."""
    clock = VirtualClock()
    log: list[tuple[str, float]] = []
    clock.call_at(2.5, recorder(clock, log, "waiting"))

    def tick(remaining: int) -> Callable[[], None]:
        def callback() -> None:
            log.append((f"tick{remaining}", clock.now()))
            if remaining:
                clock.call_at(clock.now() + 1.0, tick(remaining - 1))

        return callback

    clock.call_at(0.0, tick(3))
    clock.run()
    assert log == [
        ("tick3", 0.0),
        ("tick2", 1.0),
        ("tick1", 2.0),
        ("waiting", 2.5),
        ("tick0", 3.0),
    ]


def test_a_time_in_the_past_runs_at_the_current_time() -> None:
    """call_at with a time already past runs at `now`: the clock never goes back, and it
    runs after callbacks already due at that time."""
    clock = VirtualClock()
    log: list[tuple[str, float]] = []

    def at_five() -> None:
        log.append(("five", clock.now()))
        clock.call_at(1.0, recorder(clock, log, "past"))

    clock.call_at(5.0, at_five)
    clock.call_at(5.0, recorder(clock, log, "also five"))
    clock.call_at(6.0, recorder(clock, log, "six"))
    clock.run()
    assert log == [("five", 5.0), ("also five", 5.0), ("past", 5.0), ("six", 6.0)]


def test_a_run_takes_no_real_time_and_at_reads_the_virtual_clock() -> None:
    """An hour of simulated time passes at once; `at()` of any real reading is `now()`."""
    clock = VirtualClock()
    seen: list[float] = []
    clock.call_at(3600.0, lambda: seen.append(clock.at(time.monotonic())))
    started = time.perf_counter()
    clock.run()
    assert time.perf_counter() - started < 1.0
    assert seen == [3600.0]
