"""What a run measured: one record per request, samples of the fleet over time, and the
summary both reduce to. A replay in simulated time and a run against a live server write
the same shapes, so that two runs compare key for key."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One request, its times in seconds (arrival from the run's start)."""

    index: int
    line: int  # in the trace file
    instance: int  # -1: answered by no instance (refused before, or sent to a live server)
    arrival: float
    input_tokens: int
    output_tokens: int = 0
    cached_tokens: int = 0
    queue_time: float | None = None  # from arrival to the first scheduling
    ttft: float | None = None
    itl: float | None = None  # mean inter-token latency (TPOT): (e2e - ttft) / (tokens - 1)
    e2e: float | None = None
    preemptions: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e is not None


REQUEST_COLUMNS = tuple(f.name for f in fields(RequestRecord))


@dataclass(slots=True)
class Sample:
    """The fleet at one moment: totals, and running sequences per instance."""

    time: float
    running: int
    waiting: int
    kv_usage: float  # mean over instances of the share of KV blocks held
    preemptions: int  # since the start
    finished: int  # since the start
    running_per_instance: list[int] = field(default_factory=list)


# Samples a run keeps at most: past them every other one is dropped and the interval
# doubles, so that a tiny interval over a long trace cannot fill the memory.
MAX_SAMPLES = 100_000

SAMPLE_COLUMNS = ("time", "running", "waiting", "kv_usage", "preemptions", "finished")

# The latencies a summary reduces, each over the requests that have it.
LATENCIES: tuple[str, ...] = ("ttft", "itl", "e2e", "queue_time")


@dataclass(frozen=True, slots=True)
class Distribution:
    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        if not values:
            return None
        ordered = sorted(values)
        return cls(
            len(ordered),
            statistics.fmean(ordered),
            _quantile(ordered, 0.50),
            _quantile(ordered, 0.90),
            _quantile(ordered, 0.99),
            ordered[-1],
        )


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(slots=True)
class Summary:
    requests: int
    completed: int
    failed: int
    duration: float  # from the first arrival to the last answer, seconds
    request_throughput: float  # completed requests per second
    output_throughput: float  # generated tokens per second
    input_throughput: float  # prompt tokens of completed requests per second
    prefix_cache_hit_rate: float  # cached prompt tokens over prompt tokens
    preemptions: int
    max_running: int
    max_waiting: int
    mean_kv_usage: float
    max_kv_usage: float
    latencies: dict[str, Distribution | None]

    def means(self) -> dict[str, float]:
        """Every reported mean and rate, flat: what `compare` sets side by side."""
        flat = {
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
        }
        for name, dist in self.latencies.items():
            if dist is not None:
                for stat in ("mean", "p50", "p90", "p99"):
                    flat[f"{name}_{stat}"] = getattr(dist, stat)
        return flat


def summarize(records: Sequence[RequestRecord], samples: Sequence[Sample]) -> Summary:
    done = [r for r in records if r.ok]
    first = min((r.arrival for r in records), default=0.0)
    last = max((r.arrival + (r.e2e or 0.0) for r in done), default=first)
    duration = max(last - first, 1e-9)
    prompt = sum(r.input_tokens for r in done)
    cached = sum(r.cached_tokens for r in done)

    def values(pick: Callable[[RequestRecord], float | None]) -> list[float]:
        return [v for v in (pick(r) for r in done) if v is not None]

    latencies = {
        "ttft": Distribution.of(values(lambda r: r.ttft)),
        "itl": Distribution.of(values(lambda r: r.itl)),
        "e2e": Distribution.of(values(lambda r: r.e2e)),
        "queue_time": Distribution.of(values(lambda r: r.queue_time)),
    }
    usage = [s.kv_usage for s in samples]
    return Summary(
        requests=len(records),
        completed=len(done),
        failed=len(records) - len(done),
        duration=duration,
        request_throughput=len(done) / duration,
        output_throughput=sum(r.output_tokens for r in done) / duration,
        input_throughput=prompt / duration,
        prefix_cache_hit_rate=cached / prompt if prompt else 0.0,
        preemptions=sum(r.preemptions for r in records),
        max_running=max((s.running for s in samples), default=0),
        max_waiting=max((s.waiting for s in samples), default=0),
        mean_kv_usage=statistics.fmean(usage) if usage else 0.0,
        max_kv_usage=max(usage, default=0.0),
        latencies=latencies,
    )


@dataclass(slots=True)
class RunResult:
    """A whole run: how it was made, what it measured."""

    kind: str  # "replay" (simulated time) or "http" (a live server, wall clock)
    settings: dict[str, Any]
    records: list[RequestRecord]
    samples: list[Sample]
    problems: list[str]  # trace lines that could not be read
    wall_seconds: float  # the run's own real time
    summary: Summary = field(init=False)
    # An interrupted run: what it had when stopped (requests still open marked
    # "interrupted"), at `stopped_at` seconds of its time, of `trace_requests` in the trace.
    partial: bool = field(default=False, init=False)
    stopped_at: float | None = field(default=None, init=False)
    trace_requests: int | None = field(default=None, init=False)
    # What it was made from (origin.run_origin): the trace, the command, the version.
    origin: dict[str, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.summary = summarize(self.records, self.samples)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "partial": self.partial,
            **(
                {"stopped_at": self.stopped_at, "trace_requests": self.trace_requests}
                if self.partial
                else {}
            ),
            "origin": self.origin,
            "settings": self.settings,
            "summary": asdict(self.summary),
            "means": self.summary.means(),
            "wall_seconds": self.wall_seconds,
            "speedup": self.summary.duration / self.wall_seconds if self.wall_seconds else None,
            "problems": self.problems,
            "samples": [asdict(s) for s in self.samples],
        }


def rows(records: Iterable[RequestRecord]) -> Iterable[list[object]]:
    for record in records:
        yield [getattr(record, name) for name in REQUEST_COLUMNS]
