"""The token clock: each sequence's tokens at their own sampled deadlines, on one timer,
driven through a real engine on a virtual-time event loop."""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.support.virtual_time import VirtualTimeLoop, virtual_now
from tests.unit.engine.test_core import (
    assert_internal,
    finished,
    make_engine,
    request,
    run,
    served,
    started,
)
from vllm_sim.engine.latency import LatencyModel
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.timing.token_clock import TokenClock


def test_tokens_are_released_on_schedule() -> None:
    async def body() -> None:
        engine = make_engine(ttft_ms=100, itl_ms=20, tokens=10)
        stream = engine.submit(request())
        seq = stream.sequences[0]
        start = started(stream)
        arrivals: list[tuple[int, float]] = []
        while not stream.done:
            await stream.wait()
            arrivals.append((seq.emitted, virtual_now()))
            seq.sent = seq.emitted
        assert seq.ttft == pytest.approx(0.1)
        assert seq.itl_delays == pytest.approx(9 * 0.02)
        for emitted, t in arrivals:
            if emitted:
                due = start + 0.1 + (emitted - 1) * 0.02
                assert t == pytest.approx(due, abs=1e-9), f"token {emitted} off schedule"
        assert seq.t_first_token is not None
        assert seq.t_first_token - start == pytest.approx(0.1, abs=1e-9)
        assert finished(stream) - start == pytest.approx(0.28, abs=1e-9)

    run(body)


def test_token_deadlines_are_absolute_so_a_stall_does_not_accumulate() -> None:
    async def body() -> None:
        engine = make_engine(ttft_ms=100, itl_ms=20, tokens=10)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        stream = engine.submit(request())
        start = started(stream)
        # Stall the event loop for 80 ms in the middle of decoding.
        loop.call_later(0.15, loop.advance, 0.08)
        await stream.wait_done()
        elapsed = finished(stream) - start
        # Due at 100 + 9 x 20 = 280 ms; relative sleeps would end at >= 360 ms.
        assert elapsed == pytest.approx(0.28, abs=1e-9)
        assert stream.sequences[0].emitted == 10

    run(body)


def test_load_factor_set_by_running_count_at_start() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=2, ttft_ms=100, tf=3.0)
        a = engine.submit(request())
        b = engine.submit(request())
        assert a.sequences[0].ttft == pytest.approx(0.1)  # alone: factor 1
        assert b.sequences[0].ttft == pytest.approx(0.3)  # two of two slots: factor 3
        await asyncio.gather(a.wait_done(), b.wait_done())
        assert finished(b) - started(b) == pytest.approx(0.3, abs=1e-9)
        c = engine.submit(request())
        assert c.sequences[0].ttft == pytest.approx(0.1)
        await c.wait_done()

    run(body)


def test_instant_without_latency() -> None:
    async def body() -> None:
        engine = make_engine(tokens=20)
        stream = engine.submit(request())
        await asyncio.wait_for(stream.wait_done(), 0.5)
        assert stream.sequences[0].emitted == 20 and stream.sequences[0].finished
        assert engine.open_requests == 0

    run(body)


class NeverLatency(LatencyModel):
    """Inter-token delays no clock can arm."""

    def inter_token_latency(self, running: int) -> float:
        return float("nan")


def test_a_deadline_that_is_not_a_time_fails_its_request_and_the_clock_runs_on() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=2, ttft_ms=10, itl_ms=10, tokens=3)
        good = engine.submit(request())
        engine.latency = NeverLatency(engine.latency.settings, random.Random(0))
        bad = engine.submit(request())
        await asyncio.gather(good.wait_done(), bad.wait_done())
        assert good.error is None and good.sequences[0].emitted == 3
        assert_internal(bad)
        assert engine.open_requests == 0
        engine.latency = LatencyModel(engine.latency.settings, random.Random(0))
        await served(engine)

    run(body)


class Steps(EngineObserver):
    def __init__(self) -> None:
        self.tokens: list[int] = []

    def engine_step(self, tokens: int) -> None:
        self.tokens.append(tokens)


def test_the_token_clock_is_the_default_timing() -> None:
    assert isinstance(make_engine().timing, TokenClock)


def test_each_tick_and_each_instant_admission_is_one_engine_step() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=4, ttft_ms=10, itl_ms=10, tokens=3)
        steps = Steps()
        engine.observer = steps
        streams = [engine.submit(request(prompt_tokens=5)) for _ in range(2)]
        await asyncio.gather(*(s.wait_done() for s in streams))
        # Both prefills end in the tick at 10 ms, then one token each per tick.
        assert steps.tokens == [2 * (5 + 1), 2, 2]
        steps.tokens.clear()
        instant = make_engine(max_num_seqs=4, tokens=3)
        instant.observer = steps
        together = [instant.submit(request(prompt_tokens=5))]
        await together[0].wait_done()
        assert steps.tokens == [5 + 3]  # released at admission, whole

    run(body)


def test_a_preempted_sequence_releases_nothing_until_it_runs_again() -> None:
    async def body() -> None:
        engine = make_engine(itl_ms=10, tokens=5)
        stream = engine.submit(request())
        seq = stream.sequences[0]
        await asyncio.sleep(0.015)
        emitted = seq.emitted
        clock = engine.timing
        assert isinstance(clock, TokenClock)
        clock.preempted(seq)  # as the core does when it frees the sequence's slot
        await asyncio.sleep(0.1)
        assert seq.emitted == emitted and not stream.done
        stream.abort()

    run(body)
