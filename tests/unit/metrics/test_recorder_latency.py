"""The latency histograms record what happened, measured on the engine's clock, as vLLM
records them: TTFT from the request's arrival (queueing included), every request's queue
time (none included), and each inter-token gap as released, a late timer showing as a
longer gap. The sampled delays are only the targets the engine schedules to."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, run_virtual, virtual_now
from tests.unit.engine.test_core import MS, request
from vllm_sim.engine.clock import TimerHandle
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.metrics.catalogue import VllmMetrics
from vllm_sim.metrics.families import HistogramSeries
from vllm_sim.metrics.recorder import MetricsRecorder


class LateScheduler(LoopClockScheduler):
    """Fires the timers armed for the given deadlines `late` seconds after them, as a
    busy event loop would."""

    def __init__(self, late_at: set[float], late: float) -> None:
        self.late_at = late_at
        self.late = late

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        if any(abs(when - due) < 1e-9 for due in self.late_at):
            when += self.late
        return super().call_at(when, callback)


def engine_and_metrics(
    scheduler: LoopClockScheduler, *, slots: int = 1, tokens: int = 3
) -> tuple[Engine, VllmMetrics]:
    metrics = VllmMetrics("m", 1024)
    engine = Engine(
        EngineLimits(slots, 1000, 1024),
        LatencySettings(ttft=100 * MS, itl=10 * MS, max_num_seqs=slots),
        FixedContent(tokens),
        random.Random(1),
        scheduler=scheduler,
        observer=MetricsRecorder(metrics),
    )
    return engine, metrics


def observed(series: HistogramSeries) -> tuple[int, float]:
    return sum(series.counts), series.sum


def test_ttft_counts_from_arrival_and_queue_time_counts_every_request() -> None:
    async def scenario() -> VllmMetrics:
        engine, metrics = engine_and_metrics(LoopClockScheduler())
        first, second = engine.submit(request()), engine.submit(request())
        await first.wait_done()
        await second.wait_done()
        return metrics

    metrics = run_virtual(scenario())
    # The first starts at once (first token at 0.1 s, done at 0.12 s); the second waits
    # for its slot until 0.12 s, so the client sees its first token at 0.22 s.
    count, total = observed(metrics.ttft.labels("m", "0"))
    assert count == 2 and total == pytest.approx(0.1 + 0.22)
    count, total = observed(metrics.queue_time.labels("m", "0"))
    assert count == 2 and total == pytest.approx(0.0 + 0.12)


def test_ttft_includes_the_time_before_submission() -> None:
    async def scenario() -> VllmMetrics:
        engine, metrics = engine_and_metrics(LoopClockScheduler())
        await asyncio.sleep(1.0)
        late = request()
        late.received = virtual_now() - 0.25  # the body took 250 ms to arrive
        await engine.submit(late).wait_done()
        return metrics

    metrics = run_virtual(scenario())
    assert observed(metrics.ttft.labels("m", "0"))[1] == pytest.approx(0.35)
    assert observed(metrics.e2e.labels("m", "0"))[1] == pytest.approx(0.37)


def test_inter_token_gaps_are_measured_at_release() -> None:
    # Token 2 is due at 0.11 s but its timer fires at 0.14 s; token 3, due at 0.12 s, is
    # then already due and leaves with it: the client sees gaps of 40 ms and 0 ms.
    async def scenario() -> VllmMetrics:
        engine, metrics = engine_and_metrics(LateScheduler({0.11}, 0.03))
        await engine.submit(request()).wait_done()
        return metrics

    metrics = run_virtual(scenario())
    itl = metrics.itl.labels("m", "0")
    assert observed(itl) == pytest.approx((2, 0.04))
    assert itl.counts[0] == 1  # the 0 ms gap, in the first bucket
    decode = observed(metrics.decode_time.labels("m", "0"))
    assert decode == pytest.approx((1, 0.04))


def test_on_time_gaps_are_the_inter_token_latency() -> None:
    async def scenario() -> VllmMetrics:
        engine, metrics = engine_and_metrics(LoopClockScheduler(), tokens=5)
        await engine.submit(request()).wait_done()
        return metrics

    metrics = run_virtual(scenario())
    assert observed(metrics.itl.labels("m", "0")) == pytest.approx((4, 0.04))
