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
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_sim.config import ConfigError, load_config
from vllm_sim.config.gpu import resolve_gpu
from vllm_sim.whatif.arguments import offline_config
from vllm_sim.whatif.results import LATENCIES
from vllm_sim.whatif.routers import RouterName
from vllm_sim.whatif.trace import Trace, TraceFormat, read_trace

_STATS = ("mean", "p50", "p90", "p99")
SLO_METRICS: tuple[str, ...] = tuple(f"{m}_{s}" for m in LATENCIES for s in _STATS)
# --max-replicas at most: a fleet's replay holds every instance's engine in one process.
MAX_REPLICAS = 1024
# Fleet sizes tried one by one where a doubling did no better (see search_replicas).
SCAN_REPLICAS = 8
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
    kv_offloading_gib: float = 0.0  # a CPU KV tier of this size per replica (0: none)

    def flags(self) -> list[str]:
        flags = [
            "--gpu", self.gpu,
            "--tensor-parallel-size", str(self.tensor_parallel),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
        ]  # fmt: skip
        if self.kv_offloading_gib:
            flags += ["--kv-offloading-size", f"{self.kv_offloading_gib:g}"]
        return flags

    def describe(self) -> str:
        """The candidate in words: `H100 TP2 (max-num-seqs 64, max-num-batched-tokens
        2048, 100 GiB CPU KV offload)`."""
        offload = f", {self.kv_offloading_gib:g} GiB CPU KV offload" * bool(self.kv_offloading_gib)
        return (
            f"{self.gpu} TP{self.tensor_parallel} (max-num-seqs {self.max_num_seqs}, "
            f"max-num-batched-tokens {self.max_num_batched_tokens}{offload})"
        )


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
    return load_trace(job.trace_path, job.trace_format, job.limit)


def load_trace(path: str, fmt: TraceFormat, limit: int | None) -> Trace:
    """The trace, read once per process (a pool's forked workers inherit the parent's)."""
    key = (path, fmt, limit)
    trace = _TRACES.get(key)
    if trace is None:
        trace = _TRACES[key] = read_trace(Path(path), fmt, limit=limit)
    return trace


def search_candidate(job: PlanJob) -> CandidateResult:
    """The fewest replicas of one candidate that meet the SLO (worker side)."""
    from vllm_sim.server.step_timing import timed_config
    from vllm_sim.whatif.simulation import Replay, refuse_phases

    environ = dict(job.environ)
    try:
        flags = [*job.server_flags, *job.candidate.flags()]
        cfg = offline_config(load_config(flags, environ), flags)
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

    passing, failing = search_replicas(run, slo, job.max_replicas)
    return CandidateResult(job.candidate, passing, failing, points=sorted_points(points))


def search_replicas(
    run: Callable[[int], Point], slo: Mapping[str, float], max_replicas: int
) -> tuple[Point | None, Point | None]:
    """The fewest replicas that meet the SLO, and the most below them that do not (or,
    when none meets, the largest fleet tried). The replicas double until a fleet meets
    the SLO, then a bisection finds the fewest. More replicas can do worse (a router
    that splits the prefix cache, a trace too short to fill a big fleet): when a
    doubling does no better than the fleet before, the sizes between are tried one by
    one (at most SCAN_REPLICAS of them), and after two doublings in a row that do no
    better the search stops, as more replicas will not help."""
    low, high = 0, 1  # low fails (0 replicas always does), high is the next to try
    previous: Point | None = None
    stalled = 0
    while True:
        point = run(high)
        if point.meets:
            break
        if previous is not None and point.worst_ratio(slo) >= previous.worst_ratio(slo):
            for count in range(low + 1, min(high, low + 1 + SCAN_REPLICAS)):
                if run(count).meets:
                    return run(count), run(count - 1) if count > 1 else None
            stalled += 1
            if stalled >= 2:
                return None, point
        else:
            stalled = 0
        if high >= max_replicas:
            return None, point
        previous = point
        low, high = high, min(high * 2, max_replicas)
    while high - low > 1:
        middle = (low + high) // 2
        if run(middle).meets:
            high = middle
        else:
            low = middle
    return run(high), run(low) if low else None


def sorted_points(points: Mapping[int, Point]) -> list[Point]:
    return [points[k] for k in sorted(points)]


@dataclass(slots=True)
class Plan:
    slo: dict[str, float]
    results: list[CandidateResult]
    partial: bool = False  # interrupted: `unsearched` candidates were not (fully) searched
    unsearched: list[Candidate] = field(default_factory=list)
    # What it was made from (origin.run_origin): the trace, the command, the version.
    origin: dict[str, Any] = field(default_factory=dict)

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
            "origin": self.origin,
            "partial": self.partial,
            "unsearched": [asdict(c) for c in self.unsearched],
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
    gpus: Sequence[str],
    tps: Sequence[int],
    seqs: Sequence[int],
    batched: Sequence[int],
    offloads: Sequence[float] = (0.0,),
) -> list[Candidate]:
    """Every combination of the choices; `offloads` are CPU KV tier sizes in GiB (0:
    none), so that a plan may weigh fewer GPUs with an offload tier against more without."""
    return [Candidate(*combo) for combo in itertools.product(gpus, tps, seqs, batched, offloads)]


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


class Interrupted(Exception):
    """The search was stopped (SIGINT, SIGTERM): the candidates searched so far."""

    def __init__(self, done: list[CandidateResult]) -> None:
        super().__init__("interrupted")
        self.done = done


def local_executor(
    workers: int, on_done: Callable[[CandidateResult], None] | None = None
) -> Executor:
    """Candidates in this process (one worker) or a pool of worker processes, `on_done`
    told of each as it is searched. On KeyboardInterrupt the workers are terminated (none
    is left behind) and Interrupted carries the candidates done."""
    tell = on_done or (lambda result: None)

    def run(jobs: list[PlanJob]) -> list[CandidateResult]:
        done: list[CandidateResult] = []
        if workers <= 1 or len(jobs) == 1:
            try:
                for job in jobs:
                    done.append(search_candidate(job))
                    tell(done[-1])
            except KeyboardInterrupt:
                raise Interrupted(done) from None
            return done
        pool = ProcessPoolExecutor(
            max_workers=min(workers, len(jobs)),
            initializer=_worker_setup,
            initargs=(os.getpid(),),
        )
        interrupted = False
        try:
            futures = {pool.submit(search_candidate, job): i for i, job in enumerate(jobs)}
            results: dict[int, CandidateResult] = {}
            try:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    tell(results[futures[future]])
            except KeyboardInterrupt:
                interrupted = True
                stop_workers(pool)
                raise Interrupted([results[i] for i in sorted(results)]) from None
            return [results[i] for i in range(len(jobs))]
        finally:
            pool.shutdown(wait=not interrupted, cancel_futures=True)

    return run


def stop_workers(pool: ProcessPoolExecutor, grace: float = 0.5) -> None:
    """Terminates the pool's worker processes (SIGTERM, then SIGKILL after `grace`
    seconds) and waits for them: nothing is left running."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(grace)


def _worker_setup(parent: int) -> None:
    """A worker leaves interrupts to its parent (a terminal's Ctrl-C reaches the whole
    process group), dies on SIGTERM, and dies with its parent (Linux: the parent-death
    signal; elsewhere the parent's pool ends it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def ray_executor(address: str) -> Executor:
    """Ray tasks on the cluster at `address` (the optional `ray` extra)."""
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'vllm-sim[ray]'") from None

    def run(jobs: list[PlanJob]) -> list[CandidateResult]:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        remote = ray.remote(search_candidate)
        refs = [remote.remote(job) for job in jobs]
        try:
            return list(ray.get(refs))
        except KeyboardInterrupt:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise Interrupted([]) from None

    return run


def plan(jobs: list[PlanJob], slo: dict[str, float], executor: Executor) -> Plan:
    try:
        return Plan(slo, executor(jobs))
    except Interrupted as stop:
        searched = {r.candidate for r in stop.done}
        unsearched = [j.candidate for j in jobs if j.candidate not in searched]
        return Plan(slo, stop.done, partial=True, unsearched=unsearched)


def default_workers() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
