"""vLLM's scheduler gauges, read from the engine's live state."""

from __future__ import annotations

from typing import Protocol

from vllm_sim.metrics.exposition import CallbackGauge, Registry

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


class SchedulerState(Protocol):
    """What the gauges read from the engine (metrics sit below the engine layer)."""

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...


def engine_registry(engine: SchedulerState, model_name: str) -> Registry:
    """A registry with vLLM's running and waiting gauges for one engine."""
    registry = Registry()
    labels = ("model_name",)
    registry.register(
        CallbackGauge(
            RUNNING,
            "Number of requests currently running on GPU.",
            labels,
            lambda: [((model_name,), engine.num_running)],
        )
    )
    registry.register(
        CallbackGauge(
            WAITING,
            "Prometheus metric for the number of queued requests.",
            labels,
            lambda: [((model_name,), engine.num_waiting)],
        )
    )
    return registry
