"""Calibration: the step model's coefficients fitted to measurements of a real vLLM run.

The measured requests (their arrivals and token counts; no shared prefix, since the data
gives none) are replayed through the server's own engine on the virtual clock (Replay),
the candidate coefficients applied on top of the GPU through the same path every server
builds its timing by (step_timing's `coefficients`). The residuals are log ratios of
simulated to measured: each request's TPOT; the mean TTFT of each group of ten requests
in arrival order (one request's TTFT hangs on which step it lands in, which any change
of a coefficient reshuffles; a group's mean does not); per interval for /metrics input.
Each set is weighed as a whole, and the log ratios of the two means come on top: the fit
answers to the run's course and to its averages. scipy's least_squares minimises them
within physical bounds, with a Jacobian of forward differences taken here (one replay per
coefficient, steps large enough to see past the schedule's discrete jumps).

Requests interact (they share steps), so every evaluation replays the whole run; with a
holdout, only the fit share's requests give residuals and the held-out share is scored
after, on the same replays.

A coefficient whose change moves no residual (compute_efficiency when no step is
compute-bound; api_server_s when every request queues for longer anyway) cannot be had
from these measurements: it keeps its value, and the result says so.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import random
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import NDArray

from vllm_sim.config import Config
from vllm_sim.server.step_timing import roofline_gpu
from vllm_sim.whatif.measurements import Measurements
from vllm_sim.whatif.results import RequestRecord
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import Trace

Vector = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Bound:
    """Where a coefficient may go, and its typical size (the fit's unit for it)."""

    lower: float
    upper: float
    scale: float


# Physical bounds: fractions of a peak from 5% to all of it; overheads from nothing to
# well past anything a real deployment shows.
BOUNDS: Final[Mapping[str, Bound]] = {
    "weight_bandwidth_efficiency": Bound(0.05, 1.0, 1.0),
    "kv_bandwidth_efficiency": Bound(0.05, 1.0, 1.0),
    "compute_efficiency": Bound(0.05, 1.0, 1.0),
    "moe_compute_efficiency": Bound(0.05, 1.0, 1.0),
    "step_overhead_s": Bound(0.0, 0.05, 1e-3),
    "layer_overhead_s": Bound(0.0, 1e-3, 1e-5),
    "moe_layer_overhead_s": Bound(0.0, 1e-3, 1e-5),
    "prefill_layer_overhead_s": Bound(0.0, 1e-3, 1e-5),
    "per_request_overhead_s": Bound(0.0, 1e-3, 1e-5),
    "allreduce_s": Bound(0.0, 1e-3, 1e-5),
    "api_server_s": Bound(0.0, 1.0, 1e-2),
    "api_server_s_per_token": Bound(0.0, 1e-4, 1e-6),
    "link_gbps": Bound(1.0, 2000.0, 100.0),
}
# What a run's TTFT and TPOT pin down: the weights' bandwidth carries every per-step
# constant (so step_overhead_s stays the GPU's), the KV's bandwidth the cost of context,
# compute the prefill chunks, the API server the time before scheduling.
DEFAULT_FIT: Final = (
    "weight_bandwidth_efficiency",
    "kv_bandwidth_efficiency",
    "compute_efficiency",
    "api_server_s",
)
# The forward-difference step, in each coefficient's scale (5 points of a peak's share):
# large enough that the change it makes stands out from the jitter of which step each
# request lands in, small enough to stay local.
_STEP: Final = 0.05
# The relative move of every coefficient that redraws the replay's step boundaries, to
# measure each residual group's jitter; and the least jitter a group is weighed by (so a
# smooth group does not drown the others, and a measured run's own scatter is allowed for).
_NUDGE: Final = 0.02
JITTER_FLOOR: Final = 0.005
# A coefficient whose Jacobian column is below this share of the largest moves nothing.
_UNIDENTIFIABLE: Final = 1e-3
MIN_REQUESTS: Final = 20
# A fitted coefficient 10% of which moves neither mean by this much is reported as weakly
# pinned down: the run hardly depends on it.
WEAK: Final = 0.01
PROGRESS_SECONDS: Final = 2.0


def parse_fit(text: str) -> tuple[str, ...]:
    """`--fit a,b` -> the names, each a coefficient calibration can fit; ValueError else."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError("--fit names no coefficient")
    for name in names:
        if name not in BOUNDS:
            raise ValueError(f"--fit: unknown coefficient {name!r}; known: {', '.join(BOUNDS)}")
    return names


@dataclass(frozen=True, slots=True)
class Errors:
    """Simulated against measured over a set of requests (or intervals): the relative
    error of each mean (simulated / measured - 1) and the median |relative error| of one
    request (interval)."""

    count: int
    ttft_mean: float | None
    tpot_mean: float | None
    e2e_mean: float | None
    ttft_median: float | None
    tpot_median: float | None

    def as_dict(self) -> dict[str, Any]:
        return {key: _round(value) for key, value in asdict(self).items()}


def _round(value: float | int | None) -> float | int | None:
    if value is None or isinstance(value, int):
        return value
    return float(f"{value:.4g}")


class Targets(Protocol):
    """What the fit compares a replay's records with."""

    @property
    def units(self) -> int: ...  # requests, or intervals with a measured TTFT

    @property
    def unit_name(self) -> str: ...

    def residuals(
        self, records: Sequence[RequestRecord], subset: Sequence[int]
    ) -> list[Vector]: ...  # groups: TTFT terms, TPOT terms, the two means' (one each)

    def errors(self, records: Sequence[RequestRecord], subset: Sequence[int]) -> Errors: ...

    def measured(self) -> dict[str, float | None]: ...


def _log_ratio(simulated: Vector, measured: Vector) -> Vector:
    """log(simulated / measured), 0 where either is missing (a request the replay
    refused): the residual vector keeps its length."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(simulated / measured)
    return np.nan_to_num(ratio, nan=0.0, posinf=0.0, neginf=0.0)


def _mean_error(simulated: Vector, measured: Vector, weights: Vector | None = None) -> float | None:
    ok = np.isfinite(simulated) & np.isfinite(measured)
    if not ok.any():
        return None
    w = np.ones_like(simulated) if weights is None else weights
    sim = float(np.sum(simulated[ok] * w[ok]) / np.sum(w[ok]))
    meas = float(np.sum(measured[ok] * w[ok]) / np.sum(w[ok]))
    return sim / meas - 1.0 if meas > 0 else None


def _median_abs(simulated: Vector, measured: Vector) -> float | None:
    ok = np.isfinite(simulated) & np.isfinite(measured) & (measured > 0)
    if not ok.any():
        return None
    return float(np.median(np.abs(simulated[ok] / measured[ok] - 1.0)))


TTFT_BIN = 10


def _binned_log_ratio(simulated: Vector, measured: Vector, size: int) -> Vector:
    """log(simulated / measured) of the means of consecutive groups of `size` (requests
    in arrival order): one request's TTFT hangs on which step it lands in, which a small
    change of a coefficient reshuffles; a group's mean does not."""
    ok = np.isfinite(simulated) & np.isfinite(measured)
    sim, meas = simulated[ok], measured[ok]
    groups = max(len(sim) // size, 1)
    sims = [chunk.mean() for chunk in np.array_split(sim, groups)] if len(sim) else []
    meases = [chunk.mean() for chunk in np.array_split(meas, groups)] if len(meas) else []
    return _log_ratio(np.array(sims), np.array(meases))


class RequestTargets:
    """Per-request targets: each request's TTFT and TPOT."""

    unit_name = "requests"

    def __init__(self, measured: Measurements) -> None:
        requests = measured.requests
        self.ttft = np.array([r.ttft for r in requests])
        self.e2e = np.array([r.e2e for r in requests])
        self.tpot = np.array([math.nan if r.tpot is None else r.tpot for r in requests])

    @property
    def units(self) -> int:
        return len(self.ttft)

    def _simulated(self, records: Sequence[RequestRecord]) -> tuple[Vector, Vector, Vector]:
        n = self.units
        ttft, tpot, e2e = np.full(n, math.nan), np.full(n, math.nan), np.full(n, math.nan)
        for record in records:
            if record.ok and record.ttft is not None and record.e2e is not None:
                ttft[record.index] = record.ttft
                e2e[record.index] = record.e2e
                if record.itl is not None:
                    tpot[record.index] = record.itl
        return ttft, tpot, e2e

    def residuals(self, records: Sequence[RequestRecord], subset: Sequence[int]) -> list[Vector]:
        ttft, tpot, _ = self._simulated(records)
        rows = np.asarray(subset, dtype=int)
        with_tpot = rows[np.isfinite(self.tpot[rows])]
        t = _binned_log_ratio(ttft[rows], self.ttft[rows], TTFT_BIN)
        p = _log_ratio(tpot[with_tpot], self.tpot[with_tpot])
        means = [
            _log_of(_mean_error(ttft[rows], self.ttft[rows])),
            _log_of(_mean_error(tpot[with_tpot], self.tpot[with_tpot])),
        ]
        return [t, p, np.array(means[:1]), np.array(means[1:])]

    def errors(self, records: Sequence[RequestRecord], subset: Sequence[int]) -> Errors:
        ttft, tpot, e2e = self._simulated(records)
        rows = np.asarray(subset, dtype=int)
        return Errors(
            len(rows),
            _mean_error(ttft[rows], self.ttft[rows]),
            _mean_error(tpot[rows], self.tpot[rows]),
            _mean_error(e2e[rows], self.e2e[rows]),
            _median_abs(ttft[rows], self.ttft[rows]),
            _median_abs(tpot[rows], self.tpot[rows]),
        )

    def measured(self) -> dict[str, float | None]:
        tpots = self.tpot[np.isfinite(self.tpot)]
        return {
            "ttft": float(self.ttft.mean()),
            "tpot": float(tpots.mean()) if len(tpots) else None,
            "e2e": float(self.e2e.mean()),
        }


class WindowTargets:
    """Per-interval targets of /metrics scrapes: the TTFT, inter-token and latency
    histograms' means between two scrapes. Simulated requests count in the interval they
    end in (vLLM observes a request's histograms as it finishes); inter-token latency is
    weighed by tokens, as the histogram counts them."""

    unit_name = "intervals"

    def __init__(self, measured: Measurements) -> None:
        self.windows = [w for w in measured.windows if w.ttft is not None]
        self.origin = measured.origin
        self.edges = np.array([w.start for w in self.windows] + [self.windows[-1].end])
        self.ttft = np.array([w.ttft for w in self.windows], dtype=float)
        self.itl = np.array([math.nan if w.itl is None else w.itl for w in self.windows])
        self.e2e = np.array([math.nan if w.e2e is None else w.e2e for w in self.windows])
        self.ttft_n = np.array([w.ttft_count for w in self.windows])
        self.itl_n = np.array([w.itl_count for w in self.windows])
        self.e2e_n = np.array([w.e2e_count for w in self.windows])

    @property
    def units(self) -> int:
        return len(self.windows)

    def _simulated(self, records: Sequence[RequestRecord]) -> dict[str, Vector]:
        n = self.units
        sums = {k: np.zeros(n) for k in ("ttft", "e2e", "gaps", "tokens", "count")}
        for record in records:
            if not record.ok or record.ttft is None or record.e2e is None:
                continue
            ended = self.origin + record.arrival + record.e2e
            k = int(np.searchsorted(self.edges, ended, side="right")) - 1
            if not 0 <= k < n or ended >= self.windows[k].end:
                continue
            sums["count"][k] += 1
            sums["ttft"][k] += record.ttft
            sums["e2e"][k] += record.e2e
            if record.output_tokens > 1:
                sums["gaps"][k] += record.e2e - record.ttft
                sums["tokens"][k] += record.output_tokens - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            return {
                "ttft": sums["ttft"] / sums["count"],
                "e2e": sums["e2e"] / sums["count"],
                "itl": sums["gaps"] / sums["tokens"],
                "count": sums["count"],
            }

    def residuals(self, records: Sequence[RequestRecord], subset: Sequence[int]) -> list[Vector]:
        sim = self._simulated(records)
        rows = np.asarray(subset, dtype=int)
        with_itl = rows[np.isfinite(self.itl[rows])]
        t = _log_ratio(sim["ttft"][rows], self.ttft[rows])
        p = _log_ratio(sim["itl"][with_itl], self.itl[with_itl])
        itl_mean = _mean_error(sim["itl"][with_itl], self.itl[with_itl], self.itl_n[with_itl])
        means = [
            _log_of(_mean_error(sim["ttft"][rows], self.ttft[rows], self.ttft_n[rows])),
            _log_of(itl_mean),
        ]
        return [t, p, np.array(means[:1]), np.array(means[1:])]

    def errors(self, records: Sequence[RequestRecord], subset: Sequence[int]) -> Errors:
        sim = self._simulated(records)
        rows = np.asarray(subset, dtype=int)
        return Errors(
            len(rows),
            _mean_error(sim["ttft"][rows], self.ttft[rows], self.ttft_n[rows]),
            _mean_error(sim["itl"][rows], self.itl[rows], self.itl_n[rows]),
            _mean_error(sim["e2e"][rows], self.e2e[rows], self.e2e_n[rows]),
            _median_abs(sim["ttft"][rows], self.ttft[rows]),
            _median_abs(sim["itl"][rows], self.itl[rows]),
        )

    def measured(self) -> dict[str, float | None]:
        def mean(values: Vector, counts: Vector) -> float | None:
            ok = np.isfinite(values) & (counts > 0)
            return float(np.sum(values[ok] * counts[ok]) / np.sum(counts[ok])) if ok.any() else None

        return {
            "ttft": mean(self.ttft, self.ttft_n),
            "tpot": mean(self.itl, self.itl_n),
            "e2e": mean(self.e2e, self.e2e_n),
        }


def _log_of(error: float | None) -> float:
    return 0.0 if error is None or error <= -1.0 else math.log1p(error)


def targets_of(measured: Measurements) -> Targets:
    return WindowTargets(measured) if measured.windows else RequestTargets(measured)


@dataclass(slots=True)
class FitResult:
    asked: tuple[str, ...]
    fitted: tuple[str, ...]  # the ones the measurements pin down, fitted
    kept: dict[str, str]  # asked but not identifiable: why
    before: dict[str, float]
    after: dict[str, float]
    fit_units: int
    holdout_units: int
    errors_before: dict[str, Errors]  # "fit", and "holdout" with a holdout
    errors_after: dict[str, Errors]
    evaluations: int = 0
    iterations: int = 0
    seconds: float = 0.0
    refused: list[str] = field(default_factory=list)  # requests the replay itself refused
    message: str = ""  # the optimiser's reason to stop
    # What 10% more of each fitted coefficient does to the fit set's mean TTFT and TPOT
    # (relative changes), at the solution: near nothing means the measurements hardly
    # pin it down, and its fitted value matters little for runs like the measured one.
    sensitivity: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Point:
    """One replay at one set of coefficients, as the fit keeps it."""

    groups: list[Vector]  # the residual groups, unweighed
    errors: dict[str, Errors]  # "fit", and "holdout" with a holdout
    refused: list[str]  # why each request the replay could not run failed


def replay_records(
    cfg: Config,
    trace: Trace,
    environ: Mapping[str, str],
    max_concurrency: int | None,
    values: Mapping[str, float],
    progress: Callable[[int], None] | None = None,
) -> list[RequestRecord]:
    """The records of `trace` replayed on `cfg`'s server with `values` on top of its GPU."""
    # A replay's objects live until it ends: collecting meanwhile only costs time (about
    # a fifth of it).
    enabled = gc.isenabled()
    gc.disable()
    try:
        replay = Replay(
            cfg,
            trace,
            environ=environ,
            coefficients=dict(values),
            max_concurrency=max_concurrency,
            progress=progress,
        )
        return replay.run().records
    finally:
        if enabled:
            gc.enable()


# A worker process's replay inputs, set once by its initializer.
_WORKER: dict[str, Any] = {}


def _worker_start(
    cfg: Config, trace: Trace, environ: Mapping[str, str], max_concurrency: int | None
) -> None:
    # Ctrl-C is the parent's to handle: it stops the pool, the workers stop with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.update(cfg=cfg, trace=trace, environ=environ, max_concurrency=max_concurrency)


def _worker_replay(values: Mapping[str, float]) -> list[RequestRecord]:
    w = _WORKER
    return replay_records(w["cfg"], w["trace"], w["environ"], w["max_concurrency"], values)


class Calibration:
    """One fit of `names` to `measured`, replaying it on `cfg`'s server."""

    def __init__(
        self,
        cfg: Config,
        measured: Measurements,
        names: Sequence[str] = DEFAULT_FIT,
        holdout: float = 0.0,
        seed: int = 0,
        environ: Mapping[str, str] | None = None,
        say: Callable[[str], None] | None = None,
        max_iterations: int = 30,
        workers: int = 1,
        tolerance: float = 1e-2,
    ) -> None:
        self.cfg = cfg
        self.measured = measured
        self.names = tuple(names)
        self.environ = dict(environ or {})
        self.say = say or (lambda _: None)
        self.max_iterations = max_iterations
        self.workers = workers
        self.tolerance = tolerance
        self._pool: ProcessPoolExecutor | None = None
        self.trace = Trace(list(measured.workload))
        self.targets = targets_of(measured)
        self.fit_set, self.holdout_set = split(self.targets.units, holdout, seed)
        gpu, _, _ = roofline_gpu(cfg)
        self.start = {name: float(getattr(gpu, name)) for name in self.names}
        self.evaluations = 0
        self.iterations = 0
        self._cache: dict[tuple[float, ...], _Point] = {}
        self._weights: list[float] | None = None  # per residual group, once the jitter is known
        self.jitter: list[float] = []  # per residual group
        self._active: tuple[str, ...] = self.names
        self._last_line = time.monotonic()
        self._started = time.monotonic()

    # ----------------------------------------------------------------- the replays
    def simulate(self, values: Mapping[str, float]) -> list[RequestRecord]:
        """The measured workload replayed with `values` on top of the flags' GPU."""
        self.evaluations += 1
        return replay_records(
            self.cfg,
            self.trace,
            self.environ,
            self.measured.max_concurrency,
            values,
            self._tick,
        )

    def simulate_many(self, batch: Sequence[Mapping[str, float]]) -> list[list[RequestRecord]]:
        """Several replays, in the worker processes when there are any."""
        if self.workers <= 1 or len(batch) <= 1:
            return [self.simulate(values) for values in batch]
        starting = self._pool is None
        # Workers start with Ctrl-C ignored (an ignored signal stays ignored in a new
        # interpreter), so one pressed while they import leaves no traceback of theirs:
        # the parent stops them.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if starting and main else None
        try:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    min(self.workers, len(self.names)),
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_start,
                    initargs=(self.cfg, self.trace, self.environ, self.measured.max_concurrency),
                )
            futures: list[Future[list[RequestRecord]]] = [
                self._pool.submit(_worker_replay, dict(values)) for values in batch
            ]
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        pending: set[Future[list[RequestRecord]]] = set(futures)
        while pending:
            _, pending = wait(pending, timeout=PROGRESS_SECONDS, return_when=FIRST_COMPLETED)
            self._tick(0, f"{len(batch) - len(pending)} of {len(batch)} parallel replays done")
        self.evaluations += len(batch)
        return [future.result() for future in futures]

    def close(self) -> None:
        """Stops the worker processes, if any (at once: a stop mid-fit drops their work)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _tick(self, _: int, what: str = "") -> None:
        now = time.monotonic()
        if now - self._last_line >= PROGRESS_SECONDS:
            self._last_line = now
            what = what or f"replay {self.evaluations + 1}"
            self.say(f"  ... {what}, {now - self._started:.0f} s in")

    def _values(self, u: Vector) -> dict[str, float]:
        values = dict(self.start)
        for name, x in zip(self._active, u, strict=True):
            bound = BOUNDS[name]
            values[name] = float(min(max(x * bound.scale, bound.lower), bound.upper))
        return values

    def _evaluate(self, u: Vector) -> tuple[Vector, _Point]:
        return self._evaluate_many([u])[0]

    def _evaluate_many(self, points: Sequence[Vector]) -> list[tuple[Vector, _Point]]:
        return [(self._weigh(point.groups), point) for point in self._points_at(points)]

    def _points_at(self, points: Sequence[Vector]) -> list[_Point]:
        keys = [tuple(float(x) for x in u) for u in points]
        missing = [i for i, key in enumerate(keys) if key not in self._cache]
        runs = self.simulate_many([self._values(points[i]) for i in missing])
        for i, records in zip(missing, runs, strict=True):
            # What the fit and the report need of a replay, not its records: a long
            # run's records are many, and the cache keeps several replays.
            hit = _Point(
                self.targets.residuals(records, self.fit_set),
                self._errors(records),
                [r.error or "failed" for r in records if not r.ok],
            )
            # The last few points: the optimiser asks again for the one it stands on.
            self._cache = {**dict(list(self._cache.items())[-8:]), keys[i]: hit}
        return [self._cache[key] for key in keys]

    def _weigh(self, groups: list[Vector]) -> Vector:
        """The residual vector: each group over its size's square root (a group of many
        terms counts no more than a group of few) and over its replay jitter."""
        weights = self._weights
        if weights is None:
            weights = [1.0 / math.sqrt(len(g)) if len(g) else 0.0 for g in groups]
        return np.concatenate([g * w for g, w in zip(groups, weights, strict=True)])

    def _measure_jitter(self, u: Vector, lower: Vector, upper: Vector, mask: Vector) -> None:
        """Sets each residual group's weight from how much it jitters: the coefficients
        moved by a thousandth either way change every step by as little, which moves no
        latency by itself but shifts the step boundaries, so which step each request
        lands in is drawn anew. A group that jitters more (a few requests' TTFT at low
        load) counts for less; none counts for more than JITTER_FLOOR allows."""
        nudged = [
            np.clip(np.where(mask, u * (1.0 + sign * _NUDGE), u), lower, upper)
            for sign in (1.0, -1.0)
        ]
        base, *others = self._points_at([u, *nudged])
        weights: list[float] = []
        jitter: list[float] = []
        for k, group in enumerate(base.groups):
            if not len(group):
                weights.append(0.0)
                jitter.append(0.0)
                continue
            # (f(+) + f(-)) / 2 - f(0): the smooth change cancels to first order, what
            # is left is jitter, of variance 1.5 sigma^2 for independent draws.
            curve = (others[0].groups[k] + others[1].groups[k]) / 2.0 - group
            sigma = math.sqrt(float(np.mean(curve**2)) / 1.5)
            jitter.append(sigma)
            weights.append(1.0 / max(sigma, JITTER_FLOOR) / math.sqrt(len(group)))
        self._weights, self.jitter = weights, jitter

    # ----------------------------------------------------------------- the fit
    def run(self) -> FitResult:
        try:
            return self._run()
        finally:
            self.close()

    def _run(self) -> FitResult:
        from scipy.optimize import least_squares

        names = self.names
        u0 = np.array([self._unit(name, self.start[name]) for name in names])
        lower = np.array([BOUNDS[n].lower / BOUNDS[n].scale for n in names])
        upper = np.array([BOUNDS[n].upper / BOUNDS[n].scale for n in names])
        _, start = self._evaluate(u0)
        before_errors = start.errors
        refused = start.refused
        self.say(f"  defaults: {self._status(before_errors['fit'])}")
        jacobian0 = self._jacobian(u0, lower, upper)
        norms = np.linalg.norm(jacobian0, axis=0)
        top = float(norms.max()) if len(norms) else 0.0
        kept: dict[str, str] = {}
        active = []
        for i, name in enumerate(names):
            if top <= 0 or norms[i] < _UNIDENTIFIABLE * top:
                kept[name] = (
                    "not identifiable from these measurements: changing it moves no measured "
                    f"latency; kept at {_show(self.start[name])}"
                )
            else:
                active.append(i)
        sensitivity: dict[str, tuple[float, float]] = {}
        if not active:
            self._active = ()
            after = dict(self.start)
            message = "nothing to fit"
        else:
            idx = np.array(active)
            mask = np.zeros(len(names), dtype=bool)
            mask[idx] = True
            self._measure_jitter(u0, lower, upper, mask)
            self.say(
                f"  replay jitter: grouped TTFT {100 * self.jitter[0]:.2f}%, TPOT "
                f"{100 * self.jitter[1]:.2f}%, mean TTFT {100 * self.jitter[2]:.2f}%, mean "
                f"TPOT {100 * self.jitter[3]:.2f}%"
            )
            jacobian0 = self._jacobian(u0, lower, upper)  # the same replays, now weighed
            self._active = tuple(names[i] for i in active)
            sub_lower, sub_upper = lower[idx], upper[idx]
            start_u = np.clip(u0[idx], sub_lower, sub_upper)
            # The optimiser starts where the derivatives above were taken: no replay again.
            self._cache[tuple(float(x) for x in start_u)] = self._cache[tuple(float(x) for x in u0)]
            cached_jacobian = {tuple(float(x) for x in start_u): jacobian0[:, idx]}

            def fun(u: Vector) -> Vector:
                return self._evaluate(u)[0]

            def jac(u: Vector) -> Vector:
                self.iterations += 1
                key = tuple(float(x) for x in u)
                matrix = cached_jacobian.pop(key, None)
                if matrix is None:
                    matrix = self._jacobian(u, sub_lower, sub_upper)
                residuals, point = self._evaluate(u)
                cost = 0.5 * float(residuals @ residuals)
                errors = point.errors["fit"]
                self.say(
                    f"  iteration {self.iterations}: cost {cost:.5f}, {self._status(errors)}; "
                    f"{self._coefficients_text(u)}"
                )
                return matrix

            solution = least_squares(
                fun,
                start_u,
                jac=jac,
                bounds=(sub_lower, sub_upper),
                method="trf",
                x_scale=1.0,
                # The replays' own jitter (which step a request lands in) is a few parts
                # in a thousand: finer tolerances only chase it.
                ftol=self.tolerance,
                xtol=self.tolerance,
                gtol=1e-8,
                max_nfev=self.max_iterations,
            )
            after = self._values(solution.x)
            message = str(solution.message)
            sensitivity = self._sensitivity(solution.x, sub_lower, sub_upper)
        end = start
        if self._active:
            _, end = self._evaluate(np.array([self._unit(n, after[n]) for n in self._active]))
        return FitResult(
            names,
            self._active,
            kept,
            dict(self.start),
            after,
            len(self.fit_set),
            len(self.holdout_set),
            before_errors,
            end.errors,
            self.evaluations,
            self.iterations,
            time.monotonic() - self._started,
            refused,
            message,
            sensitivity,
        )

    def _sensitivity(
        self, u: Vector, lower: Vector, upper: Vector
    ) -> dict[str, tuple[float, float]]:
        """Per fitted coefficient, the relative change of the fit set's mean TTFT and mean
        TPOT for 10% more of it, from the derivative replays at `u` (the optimiser's last
        ones, so mostly cached)."""
        points = self._difference_points(u, lower, upper)
        results = self._evaluate_many(points)
        base = results[0][1].errors["fit"]
        found: dict[str, tuple[float, float]] = {}
        for j, name in enumerate(self._active):
            moved = results[j + 1][1].errors["fit"]
            value = u[j] * BOUNDS[name].scale
            change = (points[j + 1][j] - u[j]) * BOUNDS[name].scale
            if value <= 0 or change == 0:
                continue
            per_tenth = 0.1 * value / change
            found[name] = (
                _relative_change(base.ttft_mean, moved.ttft_mean) * per_tenth,
                _relative_change(base.tpot_mean, moved.tpot_mean) * per_tenth,
            )
        return found

    def _difference_points(self, u: Vector, lower: Vector, upper: Vector) -> list[Vector]:
        """`u`, then `u` with each coefficient moved by the difference step (backwards at
        an upper bound)."""
        points = [u]
        for j in range(len(u)):
            step = _STEP if u[j] + _STEP <= upper[j] else -_STEP
            moved = u.copy()
            moved[j] = min(max(u[j] + step, lower[j]), upper[j])
            points.append(moved)
        return points

    def _jacobian(self, u: Vector, lower: Vector, upper: Vector) -> Vector:
        """Forward differences, one replay per coefficient."""
        points = self._difference_points(u, lower, upper)
        results = self._evaluate_many(points)
        base = results[0][0]
        columns = [
            (shifted - base) / (points[j + 1][j] - u[j])
            for j, (shifted, _) in enumerate(results[1:])
        ]
        return np.column_stack(columns) if columns else np.zeros((len(base), 0))

    def _unit(self, name: str, value: float) -> float:
        bound = BOUNDS[name]
        return min(max(value, bound.lower), bound.upper) / bound.scale

    def _errors(self, records: Sequence[RequestRecord]) -> dict[str, Errors]:
        errors = {"fit": self.targets.errors(records, self.fit_set)}
        if self.holdout_set:
            errors["holdout"] = self.targets.errors(records, self.holdout_set)
        return errors

    def _status(self, errors: Errors) -> str:
        return f"mean TTFT {_percent(errors.ttft_mean)}, mean TPOT {_percent(errors.tpot_mean)}"

    def _coefficients_text(self, u: Vector) -> str:
        values = self._values(u)
        return " ".join(f"{_short(n)} {_show(values[n])}" for n in self._active)


def _relative_change(before: float | None, after: float | None) -> float:
    """(1 + after) / (1 + before) - 1 of two relative errors: the change of the simulated
    mean itself."""
    if before is None or after is None or before <= -1.0:
        return 0.0
    return (1.0 + after) / (1.0 + before) - 1.0


def split(units: int, holdout: float, seed: int) -> tuple[list[int], list[int]]:
    """(fit, holdout) indices: a seeded random `holdout` share held out."""
    if holdout <= 0:
        return list(range(units)), []
    held = set(random.Random(seed).sample(range(units), round(units * holdout)))
    return [i for i in range(units) if i not in held], sorted(held)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def _show(value: float) -> str:
    return f"{value:.4g}"


_SHORT = {
    "weight_bandwidth_efficiency": "weights",
    "kv_bandwidth_efficiency": "kv",
    "compute_efficiency": "compute",
    "api_server_s": "api",
}


def _short(name: str) -> str:
    return _SHORT.get(name, name)
