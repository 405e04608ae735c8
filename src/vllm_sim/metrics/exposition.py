"""What GET /metrics serves: one prometheus_client registry, printed as vLLM prints it.

The registry holds what vLLM's holds, in its order: the client library's garbage-collector,
platform (`python_info`) and process collectors, then the simulator's families (vLLM's
engine families, then the HTTP families of its instrumentator), each a collector that turns
the simulator's own series into metric families when scraped.

GET /metrics is answered by vLLM's HTTP instrumentator: the classic text format with the
client library's latest content type, whatever the Accept header asks (so Prometheus, which
asks for OpenMetrics, still reads the `vllm:` names with their colons; the library's
OpenMetrics writer would escape them to underscores), and never compressed.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from vllm_sim.metrics.families import Family

CONTENT_TYPE = CONTENT_TYPE_LATEST.encode()  # text/plain; version=1.0.0; charset=utf-8


class Families:
    """A collector over families in the order they were registered."""

    def __init__(self) -> None:
        self._families: list[Family] = []

    def register(self, family: Family) -> None:
        self._families.append(family)

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            metric = family.collect()
            if metric is not None:
                yield metric


class Exposition:
    """One instance's /metrics: the client library's collectors, then `collectors`."""

    def __init__(self, *collectors: Collector) -> None:
        self.registry = CollectorRegistry()
        # The order vLLM's default registry lists them in.
        GCCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        ProcessCollector(registry=self.registry)
        for collector in collectors:
            self.registry.register(collector)

    def scrape(self) -> bytes:
        """The page, in the classic text format (its content type is CONTENT_TYPE)."""
        return generate_latest(self.registry)


def render(collector: Collector) -> str:
    """The classic text exposition of one collector alone (tests, tools)."""
    return generate_latest(collector).decode()
