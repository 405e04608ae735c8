"""The output lag's bookkeeping on a clock the test moves: the gauges' mean and maximum over
the last 5 to 10 seconds of writes, 0 once nothing was written for a whole window, and the
warning, only while the mean is over 5 ms and at most once every 10 seconds."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, run_virtual
from tests.unit.engine.test_core import MS, request
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.request import Delivery
from vllm_sim.frontend.driver import answer_written
from vllm_sim.metrics.exposition import Families, render
from vllm_sim.metrics.lag import LAG, LAG_MAX, LagObserver, OutputLag, RateLimit, lag_gauges


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lag_on(clock: Clock) -> OutputLag:
    return OutputLag(clock, "m, engine 0", warnings=RateLimit(10.0, clock))


def test_the_gauges_cover_the_current_half_window_and_the_one_before() -> None:
    clock = Clock()
    lag = lag_on(clock)
    assert (lag.mean(), lag.longest()) == (0.0, 0.0)  # nothing written yet
    lag.sample(0.002, clock.now)  # opens a half-window ending at 105
    lag.sample(0.004, clock.now)
    assert lag.mean() == pytest.approx(0.003) and lag.longest() == 0.004
    clock.now = 106.0
    lag.sample(0.006, clock.now)  # 105-110 is the previous half: the three writes count
    assert lag.mean() == pytest.approx(0.004) and lag.longest() == 0.006
    clock.now = 111.5
    lag.sample(0.001, clock.now)  # the first two writes are more than a half-window old
    assert lag.mean() == pytest.approx(0.0035) and lag.longest() == 0.006
    clock.now = 120.0  # no write since the half-window that ended at 116.5
    assert lag.mean() == pytest.approx(0.001) and lag.longest() == 0.001
    clock.now = 122.0  # nor in the one after: nothing recent
    assert (lag.mean(), lag.longest()) == (0.0, 0.0)


def test_a_gap_longer_than_a_half_window_drops_the_old_writes() -> None:
    clock = Clock()
    lag = lag_on(clock)
    lag.sample(0.050, clock.now)
    clock.now = 112.0  # the half-window ended at 105: more than one ago
    lag.sample(0.001, clock.now)
    assert lag.mean() == pytest.approx(0.001)


def test_a_mean_over_10_ms_is_warned_once_per_10_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    lag = lag_on(clock)
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        for tick in range(250):  # 25 s of writes, each 20 ms after its release
            clock.now = 100.0 + tick * 0.1
            lag.sample(0.020, clock.now)
    warnings = [r for r in caplog.records if "cannot keep up" in r.getMessage()]
    # Checked as each half-window ends (105, 110, ... 120), warned at most every 10 s.
    assert len(warnings) == 2
    message = warnings[0].getMessage()
    assert "20.0 ms" in message and "m, engine 0" in message and "/metrics" in message


def test_a_process_that_keeps_up_is_not_warned(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock)
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        for tick in range(300):
            clock.now = 100.0 + tick * 0.1
            # Mostly microseconds, now and then a slow write: the mean stays far below.
            lag.sample(0.050 if tick % 100 == 0 else 0.00002, clock.now)
    assert not [r for r in caplog.records if "cannot keep up" in r.getMessage()]
    assert lag.longest() == 0.050


def test_the_gauges_are_the_simulators_own_families() -> None:
    clock = Clock()
    lag = lag_on(clock)
    lag.sample(0.25, clock.now)
    families = Families()
    for family in lag_gauges(("m", "0"), lag):
        families.register(family)
    text = render(families)
    assert f'{LAG}{{engine="0",model_name="m"}} 0.25' in text
    assert f'{LAG_MAX}{{engine="0",model_name="m"}} 0.25' in text
    assert f"# TYPE {LAG} gauge" in text


def test_without_request_metrics_the_writes_lag_is_still_measured() -> None:
    """--disable-log-stats and fake metrics record no request metric, and the process's
    lag is still measured, from the same writes."""

    async def scenario() -> float:
        scheduler = LoopClockScheduler()
        lag = OutputLag(scheduler.now)
        sim = Engine(
            EngineLimits(1, 10, 1024),
            LatencySettings(ttft=100 * MS, itl=10 * MS, max_num_seqs=1),
            FixedContent(3),
            random.Random(1),
            scheduler=scheduler,
            observer=LagObserver(lag),
        )
        generation = request()
        generation.delivery = Delivery.WHOLE
        stream = sim.submit(generation)
        await stream.wait_done()  # ends at 0.12 s
        await asyncio.sleep(0.03)  # the answer is written 30 ms later
        answer_written(stream)
        return lag.longest()

    assert run_virtual(scenario()) == pytest.approx(0.03)
