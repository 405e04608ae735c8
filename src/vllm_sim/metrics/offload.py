"""vLLM 0.32's CPU-offloading metrics: the families its OffloadingConnector registers
(`OffloadPromMetrics`, vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py,
with the CPU spec's own from vllm/v1/kv_offload/cpu/spec.py), in its order, with its help
texts, labels and buckets, registered only where offloading is on (as vLLM registers a
connector's families only with a connector).

As in vLLM the deprecated `transfer_type` families have their two series from the start;
the others appear with their first sample. Loads and stores are counted when issued, in
bytes over the host link and the seconds the link takes. The CPU tier's usage gauges are
the share of its blocks pinned by transfers in flight: none here, where a transfer's blocks
are the tier's the moment it is issued (so they read 0, as an idle vLLM's do).
"""

from __future__ import annotations

from bisect import bisect_left

from vllm_sim.engine.kvcache.offload import OffloadListener
from vllm_sim.metrics.families import Counter, Family, Gauge, Histogram, HistogramSeries

MODEL = ("model_name", "engine")
TRANSFER = (*MODEL, "transfer_type")
LOAD, STORE = "CPU_to_GPU", "GPU_to_CPU"

TOTAL_BYTES = "vllm:kv_offload_total_bytes"
TOTAL_TIME = "vllm:kv_offload_total_time"
SIZE = "vllm:kv_offload_size"
CPU_CACHE_USAGE = "vllm:kv_offload_cpu_cache_usage_perc"
CPU_CACHE_WRITE_USAGE = "vllm:kv_offload_cpu_cache_write_usage_perc"
CPU_CACHE_READ_USAGE = "vllm:kv_offload_cpu_cache_read_usage_perc"
CPU_ALLOCATION_SIZE = "vllm:kv_offload_cpu_allocation_size"
LOAD_BYTES = "vllm:kv_offload_load_bytes"
LOAD_TIME = "vllm:kv_offload_load_time"
LOAD_SIZE = "vllm:kv_offload_load_size"
STORE_BYTES = "vllm:kv_offload_store_bytes"
STORE_TIME = "vllm:kv_offload_store_time"
STORE_SIZE = "vllm:kv_offload_store_size"
LOOKUP_SYNC_DELAY = "vllm:kv_offload_lookup_sync_delay_seconds"
LOOKUP_ASYNC_DELAY = "vllm:kv_offload_lookup_async_delay_seconds"
ALLOCATION_FAILURE = "vllm:kv_offload_allocation_failure"

TRANSFER_SIZE_BUCKETS = (1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6)
ALLOCATION_SIZE_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
LOOKUP_SYNC_BUCKETS = (0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1)
LOOKUP_ASYNC_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10)


def _pinned(what: str) -> str:
    return (
        f"Fraction of CPU KV-cache space currently pinned by {what} (0.0 = idle, 1.0 = saturated)."
    )


class OffloadFamilies:
    """The offloading connector's families of one engine."""

    def __init__(self, labels: tuple[str, str]) -> None:
        self.labels = labels
        self.total_bytes = Counter(
            TOTAL_BYTES, "Number of bytes offloaded by KV connector", TRANSFER
        )
        self.total_time = Counter(
            TOTAL_TIME, "Total time measured by all KV offloading operations", TRANSFER
        )
        self.size = Histogram(
            SIZE, "Histogram of KV offload transfer size, in bytes.", TRANSFER,
            TRANSFER_SIZE_BUCKETS,
        )  # fmt: skip
        self.cpu_cache_usage = Gauge(
            CPU_CACHE_USAGE,
            _pinned("active transfers")[:-1]
            + ". Sustained high values indicate transfers (stores or promotions) may be "
            "dropped due to insufficient capacity.",
            MODEL,
        )
        self.cpu_cache_write_usage = Gauge(
            CPU_CACHE_WRITE_USAGE,
            _pinned("in-flight stores that have not yet completed"),
            MODEL,
        )
        self.cpu_cache_read_usage = Gauge(
            CPU_CACHE_READ_USAGE, _pinned("in-flight loads that have not yet completed"), MODEL
        )
        self.cpu_allocation_size = Histogram(
            CPU_ALLOCATION_SIZE,
            "Histogram of the number of CPU chunks requested by each KV offload prepare_store "
            "call.",
            MODEL,
            ALLOCATION_SIZE_BUCKETS,
            shown_empty=True,
        )
        self._transfer_families()

    def _transfer_families(self) -> None:
        def counter(name: str, help_text: str) -> Counter:
            return Counter(name, help_text, MODEL, shown_empty=True)

        def histogram(name: str, help_text: str, bounds: tuple[float, ...]) -> Histogram:
            return Histogram(name, help_text, MODEL, bounds, shown_empty=True)

        self.load_bytes = counter(LOAD_BYTES, "Total bytes loaded from offload storage to GPU.")
        self.load_time = counter(
            LOAD_TIME, "Total load time from offload storage to GPU, in seconds."
        )
        self.load_size = histogram(
            LOAD_SIZE, "Histogram of KV offload load operation size, in bytes.",
            TRANSFER_SIZE_BUCKETS,
        )  # fmt: skip
        self.store_bytes = counter(STORE_BYTES, "Total bytes stored from GPU to offload storage.")
        self.store_time = counter(
            STORE_TIME, "Total store time from GPU to offload storage, in seconds."
        )
        self.store_size = histogram(
            STORE_SIZE, "Histogram of KV offload store operation size, in bytes.",
            TRANSFER_SIZE_BUCKETS,
        )  # fmt: skip
        self.lookup_sync_delay = histogram(
            LOOKUP_SYNC_DELAY,
            "Histogram of the time spent in a single offload lookup call, in seconds.",
            LOOKUP_SYNC_BUCKETS,
        )
        self.lookup_async_delay = histogram(
            LOOKUP_ASYNC_DELAY,
            "Histogram of time between a request's offload lookup first deferring and the "
            "following lookup resolving, or request finish, in seconds.",
            LOOKUP_ASYNC_BUCKETS,
        )
        self.allocation_failure = counter(
            ALLOCATION_FAILURE, "Number of KV offload store allocation attempts that failed."
        )

    def families(self) -> list[Family]:
        """In vLLM's order: the deprecated transfer families, the CPU spec's, the
        connector's."""
        return [
            self.total_bytes,
            self.total_time,
            self.size,
            self.cpu_cache_usage,
            self.cpu_cache_write_usage,
            self.cpu_cache_read_usage,
            self.cpu_allocation_size,
            self.load_bytes,
            self.load_time,
            self.load_size,
            self.store_bytes,
            self.store_time,
            self.store_size,
            self.lookup_sync_delay,
            self.lookup_async_delay,
            self.allocation_failure,
        ]

    def precreate(self) -> None:
        """vLLM's start-up state: the deprecated families' two directions at 0, and (as
        after its first step) the CPU tier's usage gauges."""
        for transfer in (LOAD, STORE):
            values = (*self.labels, transfer)
            self.total_bytes.ensure(*values)
            self.total_time.ensure(*values)
            self.size.ensure(*values)
        for gauge in (self.cpu_cache_usage, self.cpu_cache_write_usage, self.cpu_cache_read_usage):
            gauge.ensure(*self.labels)


def _observe(series: HistogramSeries, value: float) -> None:
    series.counts[bisect_left(series.bounds, value)] += 1
    series.sum += value


class OffloadRecorder(OffloadListener):
    """Keeps the offloading families current as the CPU tier loads and stores."""

    def __init__(self, families: OffloadFamilies) -> None:
        self.families = families
        labels = families.labels
        self._labels = labels

    def _transfer(self, direction: str, nbytes: int, seconds: float) -> None:
        f, labels = self.families, self._labels
        loading = direction == LOAD
        (f.load_bytes if loading else f.store_bytes).labels(*labels).inc(nbytes)
        (f.load_time if loading else f.store_time).labels(*labels).inc(seconds)
        _observe((f.load_size if loading else f.store_size).labels(*labels), nbytes)
        f.total_bytes.labels(*labels, direction).inc(nbytes)
        f.total_time.labels(*labels, direction).inc(seconds)
        _observe(f.size.labels(*labels, direction), nbytes)

    def loaded(self, nbytes: int, seconds: float) -> None:
        self._transfer(LOAD, nbytes, seconds)

    def stored(self, nbytes: int, seconds: float, blocks: int) -> None:
        _observe(self.families.cpu_allocation_size.labels(*self._labels), blocks)
        self._transfer(STORE, nbytes, seconds)

    def store_failed(self) -> None:
        self.families.allocation_failure.labels(*self._labels).inc()

    def looked_up(self, seconds: float) -> None:
        _observe(self.families.lookup_sync_delay.labels(*self._labels), seconds)
