"""The scaled clock of --time-scale: simulated time F times faster than the loop's."""

from __future__ import annotations

import asyncio

import pytest

from vllm_sim.engine.clock import LoopScheduler, ScaledScheduler


def test_a_real_reading_maps_to_simulated_time_around_the_origin() -> None:
    clock = ScaledScheduler(10.0, origin=100.0)
    assert clock.at(100.0) == 100.0
    assert clock.at(101.5) == pytest.approx(115.0)
    assert LoopScheduler.at(101.5) == 101.5


def test_a_simulated_deadline_is_armed_factor_times_sooner() -> None:
    async def scenario() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        clock = ScaledScheduler(10.0)
        fired = loop.create_future()
        start_real, start_sim = loop.time(), clock.now()
        clock.call_at(start_sim + 0.5, lambda: fired.set_result(loop.time()))
        return start_real, await fired

    started, fired = asyncio.run(scenario())
    assert 0.04 <= fired - started < 0.5  # 0.5 simulated seconds are 0.05 real ones
