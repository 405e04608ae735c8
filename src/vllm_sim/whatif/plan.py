"""Capacity planning: the cheapest fleet that serves a trace within an SLO.

Every candidate (GPU x tensor-parallel size x max-num-seqs x max-num-batched-tokens) is
searched for the fewest replicas whose replay of the trace meets every SLO limit (the
replicas double until one does, then a bisection finds the fewest). A candidate whose
model does not fit its GPUs is skipped with the reason. The frontier is each candidate's
cheapest passing fleet beside its largest failing one (one replica fewer), sorted by cost
per hour: its first passing point is the plan.

Candidates run in parallel, each in a worker process (locally a process pool; with
`--ray ADDRESS`, as Ray tasks on that cluster): every replay is independent.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_sim.config import ConfigError, load_config
from vllm_sim.config.gpu import resolve_gpu
from vllm_sim.whatif.results import LATENCIES
from vllm_sim.whatif.routers import RouterName
from vllm_sim.whatif.trace import Trace, TraceFormat, read_trace

_STATS = ("mean", "p50", "p90", "p99")
SLO_METRICS: tuple[str, ...] = tuple(f"{m}_{s}" for m in LATENCIES for s in _STATS)
_DURATION = re.compile(r"^([0-9]*\.?[0-9]+)\s*(ms|s)?$")


def parse_slo(text: str) -> dict[str, float]:
    """`ttft_p99=500ms,itl_p99=50ms` -> limits in seconds; ValueError naming the part."""
    limits: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in SLO_METRICS:
            raise ValueError(
                f"SLO {part!r}: expected METRIC=LIMIT, METRIC one of {', '.join(SLO_METRICS)}"
            )
        match = _DURATION.match(value.strip())
        if match is None:
            raise ValueError(f"SLO {part!r}: the limit must be a duration such as 500ms or 0.5s")
        number = float(match.group(1))
        if number <= 0:
            raise ValueError(f"SLO {part!r}: the limit must be above zero")
        limits[name] = number / 1000 if match.group(2) == "ms" else number
    if not limits:
        raise ValueError("the SLO sets no limit")
    return limits


@dataclass(frozen=True, slots=True)
class Candidate:
    gpu: str
    tensor_parallel: int
    max_num_seqs: int
    max_num_batched_tokens: int

    def flags(self) -> list[str]:
        return [
            "--gpu", self.gpu,
            "--tensor-parallel-size", str(self.tensor_parallel),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
        ]  # fmt: skip


@dataclass(slots=True)
class Point:
    """One replay of the trace on `replicas` instances of a candidate."""

    candidate: Candidate
    replicas: int
    cost_per_hour: float
    metrics: dict[str, float]
    failed: int  # requests that failed (refused, too long, unfinished)
    meets: bool

    def worst_ratio(self, slo: Mapping[str, float]) -> float:
        """The largest metric-to-limit ratio: below 1 everywhere means the SLO holds."""
        return max(self.metrics.get(k, math.inf) / v for k, v in slo.items())


@dataclass(slots=True)
class CandidateResult:
    candidate: Candidate
    passing: Point | None  # the fewest replicas that meet the SLO
    failing: Point | None  # the most replicas that do not (one fewer than passing)
    skipped: str | None = None  # why the candidate cannot run at all
    points: list[Point] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PlanJob:
    """What a worker needs to search one candidate (plain data: it crosses processes)."""

    candidate: Candidate
    trace_path: str
    trace_format: TraceFormat
    limit: int | None
    server_flags: tuple[str, ...]
    slo: tuple[tuple[str, float], ...]
    max_replicas: int
    router: RouterName
    cost_per_gpu_hour: float
    environ: tuple[tuple[str, str], ...]


_TRACES: dict[tuple[str, str, int | None], Trace] = {}


def _trace(job: PlanJob) -> Trace:
    key = (job.trace_path, job.trace_format, job.limit)
    trace = _TRACES.get(key)
    if trace is None:
        trace = _TRACES[key] = read_trace(Path(job.trace_path), job.trace_format, limit=job.limit)
    return trace


def search_candidate(job: PlanJob) -> CandidateResult:
    """The fewest replicas of one candidate that meet the SLO (worker side)."""
    from vllm_sim.server.step_timing import timed_config
    from vllm_sim.whatif.simulation import Replay, refuse_phases

    environ = dict(job.environ)
    try:
        cfg = load_config([*job.server_flags, *job.candidate.flags()], environ)
        refuse_phases(cfg)
        timed_config(cfg, environ)  # the model must fit: ConfigError otherwise
    except ConfigError as error:
        return CandidateResult(job.candidate, None, None, skipped=str(error))
    trace = _trace(job)
    slo = dict(job.slo)
    gpus = job.candidate.tensor_parallel
    points: dict[int, Point] = {}

    def run(replicas: int) -> Point:
        point = points.get(replicas)
        if point is None:
            result = Replay(cfg, trace, replicas, job.router, environ=environ).run()
            metrics = result.summary.means()
            failed = result.summary.failed
            meets = failed == 0 and all(metrics.get(k, math.inf) <= v for k, v in slo.items())
            cost = replicas * gpus * job.cost_per_gpu_hour
            point = points[replicas] = Point(job.candidate, replicas, cost, metrics, failed, meets)
        return point

    low, high = 0, 1  # low fails (0 replicas always does), high is the next to try
    while not run(high).meets:
        if high >= job.max_replicas:
            return CandidateResult(job.candidate, None, run(high), points=sorted_points(points))
        low, high = high, min(high * 2, job.max_replicas)
    while high - low > 1:
        middle = (low + high) // 2
        if run(middle).meets:
            high = middle
        else:
            low = middle
    failing = points.get(low) if low else None
    return CandidateResult(job.candidate, points[high], failing, points=sorted_points(points))


def sorted_points(points: Mapping[int, Point]) -> list[Point]:
    return [points[k] for k in sorted(points)]


@dataclass(slots=True)
class Plan:
    slo: dict[str, float]
    results: list[CandidateResult]

    @property
    def frontier(self) -> list[Point]:
        """Each candidate's cheapest passing fleet and its largest failing one, by cost."""
        points = [p for r in self.results for p in (r.passing, r.failing) if p is not None]
        return sorted(points, key=lambda p: (p.cost_per_hour, not p.meets, p.replicas))

    @property
    def best(self) -> Point | None:
        return next((p for p in self.frontier if p.meets), None)

    @property
    def closest(self) -> Point | None:
        """When nothing meets the SLO: the point nearest to it (the smallest worst ratio)."""
        points = [p for r in self.results for p in r.points]
        return min(points, key=lambda p: (p.worst_ratio(self.slo), p.cost_per_hour), default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "slo": self.slo,
            "best": None if self.best is None else asdict(self.best),
            "closest": None
            if self.best is not None or self.closest is None
            else asdict(self.closest),
            "frontier": [asdict(p) for p in self.frontier],
            "skipped": [
                {"candidate": asdict(r.candidate), "reason": r.skipped}
                for r in self.results
                if r.skipped
            ],
        }


def candidates(
    gpus: Sequence[str], tps: Sequence[int], seqs: Sequence[int], batched: Sequence[int]
) -> list[Candidate]:
    return [Candidate(*combo) for combo in itertools.product(gpus, tps, seqs, batched)]


def gpu_costs(
    gpus: Iterable[str], overrides: Mapping[str, float], spec_file: str = ""
) -> dict[str, float]:
    """Dollars per GPU-hour: the override, else the GPU's own figure (the GPU table's, or
    the --gpu-spec-file's); ValueError for an unknown GPU or one without a cost."""
    costs = {}
    for name in gpus:
        try:
            spec = resolve_gpu(name, spec_file)
        except ValueError:
            if name not in overrides:
                raise
            spec = None  # a GPU only the server flags know: its cost is given
        cost = overrides.get(name, spec.cost_per_hour if spec is not None else 0.0)
        if cost <= 0:
            raise ValueError(
                f"no cost per hour for GPU {name}: give one with --gpu-cost {name}=DOLLARS"
            )
        costs[name] = cost
    return costs


Executor = Callable[[list[PlanJob]], list[CandidateResult]]


def local_executor(workers: int) -> Executor:
    def run(jobs: list[PlanJob]) -> list[CandidateResult]:
        if workers <= 1 or len(jobs) == 1:
            return [search_candidate(job) for job in jobs]
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            return list(pool.map(search_candidate, jobs))

    return run


def ray_executor(address: str) -> Executor:
    """Ray tasks on the cluster at `address` (the optional `ray` extra)."""
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'vllm-sim[ray]'") from None

    def run(jobs: list[PlanJob]) -> list[CandidateResult]:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        remote = ray.remote(search_candidate)
        return list(ray.get([remote.remote(job) for job in jobs]))

    return run


def plan(jobs: list[PlanJob], slo: dict[str, float], executor: Executor) -> Plan:
    return Plan(slo, executor(jobs))


def default_workers() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
