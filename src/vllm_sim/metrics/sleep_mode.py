"""vLLM's sleep-mode operation families: how long each /sleep and /wake_up took, and how
many are being awaited.

As vLLM's, they are registered at the first sleep-mode operation (a server never put to
sleep shows neither), after every family registered at start-up, with the in-flight gauge
at 0 for each operation this server has. Their only label is `operation`: vLLM's own
families carry neither `model_name` nor `engine` (they are counted by the API server, not
by an engine), and a scraper matching vLLM's series must find the same here. The duration
observed is what the operation took, measured, whether it succeeded or not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from prometheus_client.metrics_core import Metric

from vllm_sim.metrics.families import Gauge, Histogram

# vLLM also times `release_kv_cache_memory`, an endpoint this simulator does not serve.
SleepOperation = Literal["sleep", "wake"]
SLEEP_OPERATIONS: tuple[SleepOperation, ...] = ("sleep", "wake")
DURATION = "vllm:sleep_mode_operation_duration_seconds"
IN_FLIGHT = "vllm:sleep_mode_operations_in_flight"
BUCKETS = (0.01, 0.1, 1, 10, 30, 60, 120, 300, 600)
_LABELS = ("operation",)


class SleepModeMetrics:
    """The two families of one server, a collector that shows nothing until the first
    operation is recorded."""

    def __init__(self) -> None:
        self.duration = Histogram(
            DURATION, "Duration of one sleep-mode operation.", _LABELS, BUCKETS
        )
        self.in_flight = Gauge(IN_FLIGHT, "Sleep-mode operations currently awaited.", _LABELS)
        self.registered = False

    def _register(self) -> None:
        self.registered = True
        for operation in SLEEP_OPERATIONS:
            self.in_flight.ensure(operation)

    @contextmanager
    def operation(self, operation: SleepOperation) -> Iterator[None]:
        """Counts `operation` in flight while the block runs, then observes how long it took
        (on the monotonic clock, whatever the block raised)."""
        if not self.registered:
            self._register()
        awaited = self.in_flight.labels(operation)
        started = time.perf_counter()
        awaited.inc()
        try:
            yield
        finally:
            awaited.inc(-1)
            self.duration.labels(operation).observe(time.perf_counter() - started)

    def collect(self) -> Iterator[Metric]:
        if not self.registered:
            return
        for family in (self.duration, self.in_flight):
            metric = family.collect()
            if metric is not None:
                yield metric
