"""vLLM's sleep-mode families on an instance's /metrics: absent until the first sleep-mode
operation, then the duration histogram with vLLM's buckets and the in-flight gauge, labelled
by `operation` alone, as vLLM's."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.server.test_build_metrics import call, instance
from vllm_sim.metrics.exposition import render
from vllm_sim.metrics.sleep_mode import DURATION, IN_FLIGHT, SleepModeMetrics

BOUNDS = ["0.01", "0.1", "1.0", "10.0", "30.0", "60.0", "120.0", "300.0", "600.0", "+Inf"]


def families(text: str) -> list[str]:
    """vLLM's families (the simulator's own, outside its namespace, come after them)."""
    names = [f.name for f in text_string_to_metric_families(text)]
    return [name for name in names if not name.startswith("vllm_sim:")]


def test_absent_before_the_first_operation_present_after_sleep_and_wake() -> None:
    async def main() -> None:
        inst = instance("--enable-sleep-mode")
        before = (await call(inst, "GET", "/metrics"))[1].decode()
        assert "sleep_mode" not in before
        assert (await call(inst, "POST", "/sleep", b"level=1"))[0] == 200
        assert (await call(inst, "POST", "/wake_up"))[0] == 200
        text = (await call(inst, "GET", "/metrics"))[1].decode()
        parsed = {f.name: f for f in text_string_to_metric_families(text)}
        # Registered after every family of start-up, as vLLM registers them on first use.
        assert families(text)[-3:] == [DURATION, DURATION + "_created", IN_FLIGHT]
        histogram = parsed[DURATION]
        for operation in ("sleep", "wake"):
            buckets = [
                s for s in histogram.samples
                if s.name.endswith("_bucket") and s.labels["operation"] == operation
            ]  # fmt: skip
            assert [s.labels["le"] for s in buckets] == BOUNDS
            assert all(s.value == 1 for s in buckets)  # measured: far under 10 ms
            count = [s for s in histogram.samples if s.name.endswith("_count")
                     and s.labels == {"operation": operation}]  # fmt: skip
            assert [s.value for s in count] == [1.0]
        gauge = {s.labels["operation"]: s.value for s in parsed[IN_FLIGHT].samples}
        assert gauge == {"sleep": 0.0, "wake": 0.0}
        for sample in histogram.samples + parsed[IN_FLIGHT].samples:
            assert set(sample.labels) <= {"operation", "le"}  # vLLM's: no model, no engine

    asyncio.run(main())


def test_a_refused_sleep_is_no_operation() -> None:
    async def main() -> None:
        inst = instance()  # no --enable-sleep-mode: /sleep is a 400 before anything runs
        assert (await call(inst, "POST", "/sleep"))[0] == 400
        text = (await call(inst, "GET", "/metrics"))[1].decode()
        assert "sleep_mode" not in text

    asyncio.run(main())


def test_an_operation_is_in_flight_while_it_runs_and_observed_even_if_it_fails() -> None:
    metrics = SleepModeMetrics()
    assert render(metrics) == ""
    with metrics.operation("sleep"):
        assert metrics.in_flight.labels("sleep").value == 1
        assert metrics.in_flight.labels("wake").value == 0
    with pytest.raises(RuntimeError), metrics.operation("wake"):
        raise RuntimeError("the engine failed")
    assert metrics.in_flight.labels("wake").value == 0
    assert metrics.duration.labels("sleep").count == 1
    assert metrics.duration.labels("wake").count == 1
    assert "# TYPE vllm:sleep_mode_operations_in_flight gauge" in render(metrics)
