"""The step engine against measured vLLM runs, on a virtual clock (bench/fidelity.py
prints the same figures; these hold them to the issue's bounds)."""

from __future__ import annotations

import pytest

from bench import fidelity


def test_the_recorded_trace_is_whole() -> None:
    trace = fidelity.load_trace()
    assert len(trace) == 300
    assert all(r.input_tokens > 0 and r.output_tokens > 1 for r in trace)
    assert [r.queued for r in trace] == sorted(r.queued for r in trace)
    measured = fidelity.TraceStats.of(
        [r.ttft for r in trace], [r.tpot for r in trace], [r.latency for r in trace]
    )
    # The published summary of that run: TTFT mean 7097 ms, TPOT 32.5 ms, latency 28.2 s.
    assert measured.ttft_mean == pytest.approx(7.0972, abs=1e-3)
    assert measured.tpot_mean == pytest.approx(0.0325, abs=1e-4)
    assert measured.latency_mean == pytest.approx(28.2007, abs=1e-3)


def test_replaying_a_saturated_vllm_run_lands_near_its_figures() -> None:
    """300 ShareGPT requests at ~10 req/s against 128 sequences: the queue grows to
    ~100 and TTFT to seconds. Per-token pace within 10%, queueing within 20%."""
    simulated, measured = fidelity.replay_trace()
    assert simulated.tpot_mean == pytest.approx(measured.tpot_mean, rel=0.10)
    assert simulated.latency_mean == pytest.approx(measured.latency_mean, rel=0.10)
    assert simulated.ttft_mean == pytest.approx(measured.ttft_mean, rel=0.20)
    assert simulated.ttft_median == pytest.approx(measured.ttft_median, rel=0.20)


@pytest.mark.parametrize("run", fidelity.OPEN_LOOP, ids=lambda run: run.label)
def test_open_loop_itl_is_within_ten_percent_of_real_vllm(run: fidelity.OpenLoopRun) -> None:
    _, itl = fidelity.open_loop_ms(run, 20.0)
    assert itl == pytest.approx(run.itl_ms, rel=0.10)
