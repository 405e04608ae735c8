"""The latency factor (--latency-factor, a phase's `latency-factor`) slows the token clock
and the step loop alike, in virtual time: applied once when the settings reach the engine,
and to later requests only, as every reconfiguration."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.engine.test_core import finished, make_engine, request, run, started
from tests.unit.engine.timing.test_steps import STEP, decode_step, step_engine, token_times
from vllm_sim.engine.latency import LatencySettings

MS = 1_000_000


def test_scaled_settings_multiply_every_duration_and_keep_the_load_factor() -> None:
    base = LatencySettings(
        ttft=100 * MS, ttft_std=10 * MS, itl=20 * MS, itl_std=2 * MS, kv_transfer=50 * MS,
        kv_transfer_std=5 * MS, prefill_overhead=30 * MS, prefill_per_token=1 * MS,
        prefill_std=3 * MS, kv_transfer_per_token=2 * MS, kv_transfer_per_token_std=1 * MS,
        time_factor_under_load=2.0, max_num_seqs=4, image=40 * MS, image_std=4 * MS,
    )  # fmt: skip
    assert base.scaled() is base
    tripled = replace(base, factor=3.0).scaled()
    assert tripled == LatencySettings(
        ttft=300 * MS, ttft_std=30 * MS, itl=60 * MS, itl_std=6 * MS, kv_transfer=150 * MS,
        kv_transfer_std=15 * MS, prefill_overhead=90 * MS, prefill_per_token=3 * MS,
        prefill_std=9 * MS, kv_transfer_per_token=6 * MS, kv_transfer_per_token_std=3 * MS,
        time_factor_under_load=2.0, max_num_seqs=4, image=120 * MS, image_std=12 * MS,
        factor=3.0,
    )  # fmt: skip


def test_the_token_clock_runs_slower_by_the_factor_from_the_next_request() -> None:
    async def body() -> None:
        engine = make_engine(ttft_ms=100, itl_ms=20, tokens=5)
        first = engine.submit(request())
        engine.reconfigure(engine.limits, replace(engine.latency.settings, factor=3.0))
        second = engine.submit(request())
        await first.wait_done()
        await second.wait_done()
        # The first started under factor 1 and keeps it; the second runs 3x slower.
        assert finished(first) - started(first) == pytest.approx(0.1 + 4 * 0.02, abs=1e-9)
        assert finished(second) - started(second) == pytest.approx(0.3 + 4 * 0.06, abs=1e-9)

    run(body)


def test_the_step_loop_times_every_step_by_the_factor() -> None:
    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=3)
        engine.reconfigure(engine.limits, replace(engine.latency.settings, factor=2.0))
        times = await token_times(engine.submit(request(prompt_tokens=100)))
        first = 2 * (STEP + 0.0001 * 100)
        expected = [first + k * 2 * decode_step(1) for k in range(3)]
        assert times == pytest.approx(expected)

    run(scenario)
