"""How long written output trails the engine's release of it: whether this process keeps
up with its own engine.

The engine releases tokens on its schedule; the front end writes them to the clients in the
same turn of the event loop when the process keeps up (microseconds later), and later when
it does not: a step that releases a thousand tokens writes them one stream after another,
and a busy loop wakes a stream's writer late. Every write reports its lag (the write's time
less the release of the latest token it carries, or a whole answer's end), and this keeps
their mean and maximum over the last 5 to 10 seconds, for the simulator's own gauges
(`vllm_sim:output_lag_seconds`, `vllm_sim:output_lag_max_seconds`) and for a warning in
the log, at most once every 10 seconds, while the mean is over 5 ms.

A write costs a comparison, two additions and a maximum: no clock is read (the engine gave
the time), nothing is allocated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.sequence import Sequence
from vllm_sim.metrics.families import CallbackGauge, LabelValues

log = logging.getLogger("vllm_sim")

LAG = "vllm_sim:output_lag_seconds"
LAG_MAX = "vllm_sim:output_lag_max_seconds"
LAG_HELP = (
    "Mean time between the engine's release of output and its write to the client, over "
    "the writes of the last 5 to 10 seconds (0 if none): the simulator process's own "
    "lateness, which vLLM's latency histograms include. Not a vLLM metric."
)
LAG_MAX_HELP = (
    "Longest time between the engine's release of output and its write to the client, over "
    "the writes of the last 5 to 10 seconds (0 if none). Not a vLLM metric."
)
MODEL = ("model_name", "engine")

# The gauges cover two half-windows of this length: the current one and the one before.
HALF_WINDOW = 5.0
# A mean lag above this is worth a warning. A step's writes go out one after another, their
# lags from 0 to about twice the mean: at 5 ms the last ones trail their release by about
# 10 ms, the width of vLLM's first inter-token bucket, and the process spends that long
# writing each step. One that keeps up writes within microseconds to a millisecond (16
# streams of benchmark 14: 0.1 ms); 1,024 streams of a 1B model stepping together on one
# core, whose writes take about as long as the modelled step, 5 to 16 ms as the core is
# more or less shared.
WARN_ABOVE = 0.005
WARN_EVERY = 10.0  # seconds between two warnings, at least


class RateLimit:
    """At most one event every `every` seconds of `clock`."""

    __slots__ = ("_clock", "_every", "_last")

    def __init__(self, every: float = WARN_EVERY, clock: Callable[[], float] = time.monotonic):
        self._every = every
        self._clock = clock
        self._last = -float("inf")

    def allow(self) -> bool:
        now = self._clock()
        if now - self._last < self._every:
            return False
        self._last = now
        return True


# One for the process, on the wall clock: the instances of a fleet share its CPU, and a
# process that cannot keep up says so once, not once per instance.
PROCESS_WARNINGS = RateLimit()


class OutputLag:
    """The lag of the writes of one engine's output (see the module doc). `clock` is the
    engine's (simulated seconds under --time-scale, as every latency it reports)."""

    __slots__ = (
        "_clock",
        "_count",
        "_ends",
        "_half",
        "_max",
        "_prev_count",
        "_prev_max",
        "_prev_sum",
        "_sum",
        "_warnings",
        "name",
        "warn_above",
    )

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        name: str = "",
        warn_above: float = WARN_ABOVE,
        half_window: float = HALF_WINDOW,
        warnings: RateLimit = PROCESS_WARNINGS,
    ) -> None:
        self._clock = clock
        self._warnings = warnings
        self.name = name  # who lags, in the warning (the model, the rank)
        self.warn_above = warn_above
        self._half = half_window
        self._ends = -float("inf")  # when the current half-window ends
        self._sum = self._max = 0.0
        self._count = 0
        self._prev_sum = self._prev_max = 0.0
        self._prev_count = 0

    def sample(self, lag: float, now: float) -> None:
        """One write, `lag` seconds after the release of what it carries, at `now`."""
        if now >= self._ends:
            self._roll(now)
        self._sum += lag
        self._count += 1
        if lag > self._max:
            self._max = lag

    def _roll(self, now: float) -> None:
        """The current half-window ended: it becomes the previous one (unless a whole
        half-window passed with no write), and the two are checked for a warning."""
        count = self._count + self._prev_count
        if count:
            self._check(self._sum + self._prev_sum, count, max(self._max, self._prev_max))
        if now < self._ends + self._half:
            self._prev_sum, self._prev_count, self._prev_max = self._sum, self._count, self._max
        else:
            self._prev_sum, self._prev_count, self._prev_max = 0.0, 0, 0.0
        self._sum, self._count, self._max = 0.0, 0, 0.0
        self._ends = now + self._half

    def _check(self, total: float, count: int, longest: float) -> None:
        mean = total / count
        if mean <= self.warn_above or not self._warnings.allow():
            return
        where = f" ({self.name})" if self.name else ""
        log.warning(
            "Output is written %.1f ms after the engine released it on average (at most "
            "%.1f ms) over the last %d writes%s: this process cannot keep up with its load, "
            "and the latencies /metrics reports include the lag",
            mean * 1000.0,
            longest * 1000.0,
            count,
            where,
        )

    def _window(self) -> tuple[float, int, float]:
        """The writes the gauges cover now: sum, count and maximum."""
        now = self._clock()
        if now < self._ends:
            return (
                self._sum + self._prev_sum,
                self._count + self._prev_count,
                max(self._max, self._prev_max),
            )
        if now < self._ends + self._half:  # no write since the current one ended
            return self._sum, self._count, self._max
        return 0.0, 0, 0.0

    def mean(self) -> float:
        total, count, _ = self._window()
        return total / count if count else 0.0

    def longest(self) -> float:
        return self._window()[2]


def write_lag(seq: Sequence, start: int, end: int, finished: bool, now: float) -> float:
    """How long after its release a write at `now` put out what it carries: the latest
    released token of `seq` if it carries tokens [start, end), else its end; -1.0 if it
    carries neither. (A write that is one slice of a long burst is measured from the
    burst's release, which its tokens share.)"""
    if end > start:
        return now - seq.t_last_token
    if finished and seq.t_finished is not None:
        return now - seq.t_finished
    return -1.0


class LagObserver(EngineObserver):
    """The engine's observer where no request metric is recorded (--disable-log-stats,
    fake metrics): the lag of the writes alone, which is the process's, not the model's."""

    def __init__(self, lag: OutputLag) -> None:
        self.lag = lag

    def output_written(
        self, seq: Sequence, start: int, end: int, finished: bool, now: float
    ) -> None:
        lag = write_lag(seq, start, end, finished, now)
        if lag >= 0.0:
            self.lag.sample(lag, now)


def lag_gauges(labels: LabelValues, lag: OutputLag) -> list[CallbackGauge]:
    """The simulator's own gauges of `lag`, read when scraped, labelled as vLLM's
    per-engine families are."""

    def mean() -> Iterable[tuple[LabelValues, float]]:
        return [(labels, lag.mean())]

    def longest() -> Iterable[tuple[LabelValues, float]]:
        return [(labels, lag.longest())]

    return [
        CallbackGauge(LAG, LAG_HELP, MODEL, mean),
        CallbackGauge(LAG_MAX, LAG_MAX_HELP, MODEL, longest),
    ]
