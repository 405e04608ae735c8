"""What the clients got: a streamed answer's TTFT, inter-token gaps and end-to-end latency
are observed when the token driver writes them, so that a process that writes later than
its engine released shows it in /metrics; a whole answer keeps the release times and ends
when its body is written; a request no write is reported for is observed at the release.

A real engine and the real driver on a virtual-time loop; the process "falls behind" by
moving the loop's clock on between a step's release and its writes (the stall the e2e test
makes with a real sleep), so every time here is exact.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from tests.support.content import FixedContent
from tests.support.stall import StallingObserver
from tests.support.virtual_time import LoopClockScheduler, VirtualTimeLoop, run_virtual
from tests.unit.engine.test_core import MS, request
from tests.unit.frontend.test_driver import Caller, Recording
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.request import Delivery
from vllm_sim.engine.sequence import RequestStream
from vllm_sim.frontend.driver import TOKENS_PER_WRITE, answer_written, drive
from vllm_sim.metrics.catalogue import VllmMetrics
from vllm_sim.metrics.families import HistogramSeries
from vllm_sim.metrics.lag import OutputLag
from vllm_sim.metrics.recorder import MetricsRecorder

STALL = 0.03  # seconds the loop is stalled after each chosen step


class Setup:
    """An engine (TTFT 100 ms, ITL as given) whose steps numbered in `stalled` (from 1)
    are followed by a stall of STALL before their writes."""

    def __init__(
        self, tokens: int = 3, itl_ms: int = 50, stalled: frozenset[int] = frozenset()
    ) -> None:
        self.metrics = VllmMetrics("m", 4096)
        # The gauges read as at the run's start, when every write of it is recent.
        self.recorder = MetricsRecorder(self.metrics, lag=OutputLag(lambda: 0.0))
        self.stalled = stalled
        self.engine = Engine(
            EngineLimits(4, 100, 4096),
            LatencySettings(ttft=100 * MS, itl=itl_ms * MS, max_num_seqs=4),
            FixedContent(tokens),
            random.Random(1),
            scheduler=LoopClockScheduler(),
            observer=StallingObserver(self.recorder, self._stall),
        )
        self.observer = self.engine.observer
        assert isinstance(self.observer, StallingObserver)

    def _stall(self, tokens: int) -> None:
        assert isinstance(self.observer, StallingObserver)
        if self.observer.steps in self.stalled:
            loop = asyncio.get_running_loop()
            assert isinstance(loop, VirtualTimeLoop)
            loop.advance(STALL)

    def submit(self, delivery: Delivery, n: int = 1) -> RequestStream:
        generation = request(n=n)
        generation.delivery = delivery
        return self.engine.submit(generation)

    def series(self, name: str) -> HistogramSeries:
        family = getattr(self.metrics, name)
        series = family.labels("m", "0")
        assert isinstance(series, HistogramSeries)
        return series


def observed(series: HistogramSeries) -> tuple[int, float]:
    return sum(series.counts), series.sum


def written_to(writes: list[list[str]]) -> Callable[[list[str]], None]:
    def sink(parts: list[str]) -> None:
        writes.append(parts)

    return sink


def run(body: Callable[[], Awaitable[None]]) -> None:
    run_virtual(asyncio.wait_for(body(), timeout=30))


def test_a_streamed_answer_is_timed_as_its_client_gets_it() -> None:
    # Token 1 is released and written at 0.10 s; token 2, released at 0.15 s, is written
    # at 0.18 s (a stall); token 3, released at 0.20 s, at 0.23 s with the end.
    setup = Setup(stalled=frozenset({2, 3}))

    async def body() -> None:
        stream = setup.submit(Delivery.STREAM)
        await drive(stream, Caller(), Recording(), written_to([]))

    run(body)
    assert observed(setup.series("ttft")) == pytest.approx((1, 0.10))
    itl = setup.series("itl")
    assert observed(itl) == pytest.approx((2, 0.08 + 0.05))
    assert itl.counts[4] == 1  # the 80 ms gap (0.075 < gap <= 0.1); the release made none
    assert observed(setup.series("e2e")) == pytest.approx((1, 0.23))
    # The engine's phases stay on its clock: decode from the first token's release to the
    # last one's.
    assert observed(setup.series("decode_time")) == pytest.approx((1, 0.10))
    assert setup.recorder.lag.longest() == pytest.approx(STALL)


def test_a_late_first_write_is_the_ttft() -> None:
    setup = Setup(stalled=frozenset({1}))

    async def body() -> None:
        await drive(setup.submit(Delivery.STREAM), Caller(), Recording(), written_to([]))

    run(body)
    assert observed(setup.series("ttft")) == pytest.approx((1, 0.13))
    assert observed(setup.series("prefill_time")) == pytest.approx((1, 0.10))  # the engine's


def test_a_whole_answer_keeps_the_release_times_and_ends_when_written() -> None:
    setup = Setup(stalled=frozenset({2, 3}))

    async def body() -> None:
        stream = setup.submit(Delivery.WHOLE)
        await stream.wait_done()  # the last token at 0.20 s, then the stall: 0.23 s
        await asyncio.sleep(0.01)  # and building the answer
        answer_written(stream)

    run(body)
    assert observed(setup.series("ttft")) == pytest.approx((1, 0.10))
    assert observed(setup.series("itl")) == pytest.approx((2, 0.10))
    assert observed(setup.series("e2e")) == pytest.approx((1, 0.24))
    assert setup.recorder.lag.longest() == pytest.approx(0.04)


def test_a_request_no_write_is_reported_for_is_observed_at_the_release() -> None:
    setup = Setup(stalled=frozenset({2, 3}))

    async def body() -> None:
        await setup.submit(Delivery.RELEASED).wait_done()

    run(body)
    assert observed(setup.series("ttft")) == pytest.approx((1, 0.10))
    assert observed(setup.series("itl")) == pytest.approx((2, 0.10))
    assert observed(setup.series("e2e")) == pytest.approx((1, 0.20))


def test_tokens_released_together_are_gaps_of_zero_one_per_gap_the_engine_made() -> None:
    setup = Setup(tokens=6, itl_ms=0)

    async def body() -> None:
        await drive(setup.submit(Delivery.STREAM), Caller(), Recording(), written_to([]))

    run(body)
    itl = setup.series("itl")
    assert observed(itl) == (5, 0.0) and itl.counts[0] == 5
    assert observed(setup.series("ttft")) == pytest.approx((1, 0.10))


def test_a_burst_written_in_slices_observes_each_gap_once() -> None:
    tokens = TOKENS_PER_WRITE * 2 + 5
    setup = Setup(tokens=tokens, itl_ms=0)

    async def body() -> None:
        writes: list[list[str]] = []
        await drive(setup.submit(Delivery.STREAM), Caller(), Recording(), written_to(writes))
        assert len(writes) >= 3

    run(body)
    assert observed(setup.series("itl")) == (tokens - 1, 0.0)


def test_several_choices_are_each_timed_as_written() -> None:
    setup = Setup(tokens=4, stalled=frozenset({2}))

    async def body() -> None:
        await drive(setup.submit(Delivery.STREAM, n=2), Caller(), Recording(), written_to([]))

    run(body)
    assert observed(setup.series("ttft")) == pytest.approx((2, 0.20))
    # Both choices' second tokens are released at 0.15 s and written at 0.18 s.
    assert observed(setup.series("itl")) == pytest.approx((6, 2 * (0.08 + 0.02 + 0.05)))
    assert observed(setup.series("e2e")) == pytest.approx((2, 2 * 0.25))


def test_what_a_client_that_left_never_got_is_not_observed() -> None:
    setup = Setup(tokens=50, itl_ms=10)

    async def body() -> None:
        caller = Caller()
        stream = setup.submit(Delivery.STREAM)
        asyncio.get_running_loop().call_later(0.135, caller.leave)
        await drive(stream, caller, Recording(), written_to([]))

    run(body)
    # Tokens at 0.10, 0.11, 0.12 and 0.13 s reached it; its end is the abort's.
    assert observed(setup.series("ttft")) == pytest.approx((1, 0.10))
    assert observed(setup.series("itl")) == pytest.approx((3, 0.03))
    assert observed(setup.series("e2e")) == pytest.approx((1, 0.135))


def test_an_answer_the_server_ended_is_observed_once() -> None:
    """A pause in abort mode ends the request with what it released: its end is observed
    there, and not again when the driver writes it."""
    setup = Setup(tokens=50, itl_ms=10)

    async def body() -> None:
        stream = setup.submit(Delivery.STREAM)
        asyncio.get_running_loop().call_later(0.135, setup.engine.end_in_flight)
        writes: list[list[str]] = []
        await drive(stream, Caller(), Recording(), written_to(writes))
        assert writes[-1][-2:] == ["fin0", "close"]

    run(body)
    assert observed(setup.series("e2e")) == pytest.approx((1, 0.135))


def test_an_end_never_written_ends_when_the_driver_stops() -> None:
    """A stream whose last write fails: its end is observed as the driver gives up."""
    setup = Setup()

    async def body() -> None:
        def failing(parts: list[str]) -> None:
            if "fin0" in parts:
                raise ConnectionResetError
            return None

        with pytest.raises(ConnectionResetError):
            await drive(setup.submit(Delivery.STREAM), Caller(), Recording(), failing)

    run(body)
    assert observed(setup.series("e2e")) == pytest.approx((1, 0.20))
    assert observed(setup.series("itl"))[0] == 1  # the third token never left
