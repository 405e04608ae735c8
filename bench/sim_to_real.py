"""The calibration set: 13 real vLLM runs on H100, rebuilt and replayed in simulated time.

`data/s2r/s2r-trainval.json` holds real vLLM 0.15.1 runs (H100, TP 1-4, dense and MoE,
FP16 and FP8) under inference-perf's shared-prefix workloads, with each run's settings,
workload shape, measured TTFT / ITL / E2E per stage and for the whole run, and other
simulators' signed errors on the same runs. Source: inference-sim/sim-to-real-accuracy-
validation, `results_trainval/error_records.csv` at dcec3fd (the measured values), the
workload shapes from inference-sim/inference-sim `testdata/roofline_goldendataset.json` at
f90a1e3; the models' `config.json` files beside it.

Each run is rebuilt as its record describes it: `n_sys` prefix groups, each with its own
system prompt of `sys` tokens, every request that prompt plus a fresh question of `q` tokens
and exactly `out` output tokens (EOS ignored), Poisson arrivals at each stage's rate for the
stage's length. It is replayed through `vllm-sim replay`'s own Replay (the server's engine,
scheduler, prefix cache and step model) with the run's GPU, TP, max_num_batched_tokens,
max_num_seqs, quantization and KV blocks, and the simulated whole-run means are compared
with the measured ones.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import fidelity, report
from bench.options import Options
from bench.report import BenchReport, Figure
from vllm_sim.config import load_startup
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.tokenizer import SimulatedTokenizer
from vllm_sim.whatif.prompts import random_ids
from vllm_sim.whatif.results import RequestRecord
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import Trace, TraceRequest

DATA = Path(__file__).parent / "data" / "s2r"
METRICS = ("ttft_mean", "itl_mean", "e2e_mean")


@dataclass(frozen=True, slots=True)
class Stage:
    rate: float  # requests a second, Poisson
    seconds: float


@dataclass(frozen=True, slots=True)
class RealRun:
    """One measured run: its settings, workload and measured whole-run means (ms)."""

    id: str
    model: str  # folder under data/s2r/models
    gpu: str
    tp: int
    mbt: int
    mns: int
    fp8: bool
    kv_blocks: int
    sys_tokens: int
    question_tokens: int
    output_tokens: int
    groups: int
    stages: tuple[Stage, ...]
    real: dict[str, float]  # METRICS -> ms
    stages_real: tuple[dict[str, float], ...]  # per stage, METRICS -> ms
    others: dict[str, dict[str, float]] = field(default_factory=dict)  # sim -> metric -> %

    @classmethod
    def of(cls, record: dict[str, Any]) -> RealRun:
        shape = record["shape"]
        whole = record["real"]["-1"]
        others = {
            name: {m: errors["-1"][m] for m in METRICS if m in errors.get("-1", {})}
            for name, errors in record.get("others_signed_error_pct", {}).items()
            if isinstance(errors, dict) and "-1" in errors
        }
        return cls(
            record["id"],
            record["model"],
            record["gpu"],
            int(record["tp"]),
            int(record["mbt"]),
            int(record["mns"]),
            str(record["precision"]).upper() == "FP8",
            int(record["kv_blocks"]),
            int(shape["sys"]),
            int(shape["q"]),
            int(shape["out"]),
            int(shape["n_sys"]),
            tuple(Stage(float(rate), float(secs)) for rate, secs in shape["stages"]),
            {m: float(whole[m]) for m in METRICS},
            tuple(
                {m: float(record["real"][str(i)][m]) for m in METRICS}
                for i in range(len(shape["stages"]))
            ),
            others,
        )

    @property
    def label(self) -> str:
        return self.id.split(":")[0][:44]


def load_runs(path: Path = DATA / "s2r-trainval.json") -> list[RealRun]:
    with path.open(encoding="utf-8") as handle:
        return [RealRun.of(record) for record in json.load(handle)["runs"]]


def arrivals(run: RealRun, seed: int, scale: float) -> list[float]:
    """Poisson arrival times, stage after stage, each stage `scale` of its length."""
    rng = random.Random(seed)
    times: list[float] = []
    start = 0.0
    for stage in run.stages:
        end = start + stage.seconds * scale
        t = start + rng.expovariate(stage.rate)
        while t < end:
            times.append(t)
            t += rng.expovariate(stage.rate)
        start = end
    return times


def server_flags(run: RealRun, extra: Sequence[str] = ()) -> list[str]:
    """The server flags of the run's vLLM settings."""
    flags = [
        "--model",
        str(DATA / "models" / run.model),
        "--timing-model",
        "roofline",
        "--gpu",
        run.gpu,
        "--tensor-parallel-size",
        str(run.tp),
        "--max-num-batched-tokens",
        str(run.mbt),
        "--max-num-seqs",
        str(run.mns),
        "--num-gpu-blocks-override",
        str(run.kv_blocks),
        "--max-model-len",
        "4096",
        "--seed",
        "0",
    ]
    if run.fp8 and not _quantized_checkpoint(run.model):
        flags += ["--quantization", "fp8"]  # an FP8 checkpoint says so itself
    return flags + list(extra)


def _quantized_checkpoint(model: str) -> bool:
    with (DATA / "models" / model / "config.json").open(encoding="utf-8") as handle:
        return "quantization_config" in json.load(handle)


class _SharedPrefixReplay(Replay):
    """Each request is its group's system prompt and a fresh question."""

    groups: list[list[int]]
    group_of: list[int]
    question_tokens: int

    def _request(self, index: int, traced: TraceRequest) -> GenerationRequest:
        ids = self.groups[self.group_of[index]] + random_ids(
            (1 << 40) + index, self.question_tokens
        )
        model = self.cfg.served_model_name[0] if self.cfg.served_model_name else self.cfg.model
        return GenerationRequest(
            str(index), model, [Prompt(ids)], max_tokens=traced.output_length, ignore_eos=True
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    run: RealRun
    simulated: dict[str, float]  # METRICS -> ms
    requests: int
    failed: int
    stages: tuple[dict[str, float], ...] = ()  # per stage, METRICS -> ms

    def error(self, metric: str) -> float:
        """Signed relative error of the simulated whole-run mean."""
        return self.simulated[metric] / self.run.real[metric] - 1

    def decode_error(self) -> float:
        """Signed relative error of the time per output token after the first that the
        whole-run means imply, (E2E - TTFT) / (out - 1): the decode figure a client's own
        token count cannot skew (see `undercounted`)."""
        out = self.run.output_tokens
        sim, real = self.simulated, self.run.real
        simulated = (sim["e2e_mean"] - sim["ttft_mean"]) / max(out - 1, 1)
        measured = (real["e2e_mean"] - real["ttft_mean"]) / max(out - 1, 1)
        return simulated / measured - 1


def simulate(
    run: RealRun,
    scale: float = 1.0,
    seed: int = 0,
    extra: Sequence[str] = (),
    coefficients: dict[str, float] | None = None,
) -> Outcome:
    """Replays `run` (its stages `scale` as long) and returns its simulated means, with
    the step model's `coefficients` (GpuSpec fields) if given."""
    cfg = load_startup(server_flags(run, extra), {}).config
    times = arrivals(run, seed, scale)
    trace = Trace(
        [
            TraceRequest(i + 1, t, run.sys_tokens + run.question_tokens, run.output_tokens)
            for i, t in enumerate(times)
        ]
    )
    replay = _SharedPrefixReplay(
        cfg, trace, environ={}, tokenizer=SimulatedTokenizer(), coefficients=coefficients
    )
    rng = random.Random(seed + 1)
    replay.groups = [random_ids((1 << 41) + g, run.sys_tokens) for g in range(run.groups)]
    replay.group_of = [rng.randrange(run.groups) for _ in times]
    replay.question_tokens = run.question_tokens
    result = replay.run()
    done = [r for r in result.records if r.ok]
    simulated = _means(done)
    bounds = []
    start = 0.0
    for stage in run.stages:
        bounds.append((start, start + stage.seconds * scale))
        start += stage.seconds * scale
    stages = []
    for low, high in bounds:
        inside = [r for r in done if low <= r.arrival < high]
        stages.append(_means(inside))
    return Outcome(
        run, simulated, len(result.records), len(result.records) - len(done), tuple(stages)
    )


def _means(records: Sequence[RequestRecord]) -> dict[str, float]:
    if not records:
        return {m: math.nan for m in METRICS}
    return {
        "ttft_mean": statistics.fmean(r.ttft for r in records if r.ttft is not None) * 1000,
        "itl_mean": statistics.fmean(r.itl for r in records if r.itl is not None) * 1000,
        "e2e_mean": statistics.fmean(r.e2e for r in records if r.e2e is not None) * 1000,
    }


def _simulate_args(
    args: tuple[RealRun, float, int, tuple[str, ...], dict[str, float] | None],
) -> Outcome:
    return simulate(*args)


def simulate_all(
    runs: Iterable[RealRun],
    scale: float = 1.0,
    extra: Sequence[str] = (),
    workers: int = 0,
    coefficients: dict[str, float] | None = None,
) -> list[Outcome]:
    """Every run, in parallel processes (one per core unless `workers`)."""
    jobs = [(run, scale, 0, tuple(extra), coefficients) for run in runs]
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        return [_simulate_args(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_simulate_args, jobs))


def median_abs(outcomes: Sequence[Outcome], metric: str) -> float:
    return statistics.median(abs(o.error(metric)) for o in outcomes)


def counted_share(run: RealRun) -> float:
    """The share of the `out` tokens a run's measured means account for: 1 + (E2E - TTFT) /
    ITL against `out`. About 0.98-1.0 on every run but the two Llama-2-7B ones (0.77-0.79):
    their client counted fewer tokens than the server made (EOS was ignored, so the server
    ran `out` decode steps), which puts their measured ITL about 1/0.78 above the time per
    step."""
    real = run.real
    return (1 + (real["e2e_mean"] - real["ttft_mean"]) / real["itl_mean"]) / run.output_tokens


def table(outcomes: Sequence[Outcome]) -> str:
    lines = [f"{'run':44} {'TTFT':>16} {'ITL':>16} {'E2E':>18} {'blis-evolved (T/I/E)':>22}"]
    for o in outcomes:
        cells = [f"{o.simulated[m]:7.1f} {o.error(m):+7.1%}" for m in METRICS]
        blis = o.run.others.get("blis-evolved", {})
        ref = "/".join(f"{blis[m]:+.0f}" for m in METRICS if m in blis)
        lines.append(f"{o.run.label:44} {cells[0]:>16} {cells[1]:>16} {cells[2]:>18} {ref:>22}")
    medians = "  ".join(f"{m}: {median_abs(outcomes, m):.1%}" for m in METRICS)
    worst_e2e = max(abs(o.error("e2e_mean")) for o in outcomes)
    worst_ttft = max(o.error("ttft_mean") for o in outcomes)
    lines.append(
        f"median |error|  {medians}  worst E2E {worst_e2e:.1%}  worst TTFT over {worst_ttft:+.1%}"
    )
    decode = statistics.median(abs(o.decode_error()) for o in outcomes)
    skewed = [o.run.label for o in outcomes if counted_share(o.run) < 0.9]
    lines.append(
        f"median |error| of the decode time per token (E2E - TTFT) / (out - 1): {decode:.1%}"
        f"; runs whose client counted under 90% of the tokens (their ITL reads long): "
        f"{', '.join(skewed) or 'none'}"
    )
    return "\n".join(lines)


NAME = "sim-to-real"


def run(opts: Options) -> BenchReport:
    """Every calibration run (quick: each stage a fifth as long), then the RTX PRO 6000
    trace; the figures are whole-run means, simulated beside measured."""
    rep = BenchReport(NAME, "9. Sim-to-real: the calibration set of real vLLM runs")
    outcomes = simulate_all(load_runs(), 0.2 if opts.quick else 1.0)
    for outcome in outcomes:
        for metric in METRICS:
            rep.figures.append(
                Figure(
                    NAME,
                    f"{outcome.run.label} {metric}",
                    outcome.simulated[metric],
                    outcome.run.real[metric],
                    higher_is_better=False,
                )
            )
        if outcome.failed:
            rep.problems.append(f"{outcome.run.label}: {outcome.failed} requests failed")
    simulated, measured = fidelity.replay_trace()
    for name, field_name in (
        ("ttft_mean", "ttft_mean"),
        ("itl_mean", "tpot_mean"),
        ("e2e_mean", "latency_mean"),
    ):
        rep.figures.append(
            Figure(
                NAME,
                f"{TRACE_LABEL} {name}",
                getattr(simulated, field_name) * 1000,
                getattr(measured, field_name) * 1000,
                higher_is_better=False,
            )
        )
    _outcomes[rep.name] = outcomes
    return rep


TRACE_LABEL = "rtx-pro-6000-llama-3.1-8b-sharegpt-trace"
_outcomes: dict[str, list[Outcome]] = {}


def show(rep: BenchReport) -> None:
    outcomes = _outcomes.get(rep.name)
    if outcomes:
        print(table(outcomes))
    rows = [
        [
            f.metric.removeprefix(TRACE_LABEL + " "),
            f"{f.sim:.1f}",
            f"{f.base:.1f}",
            f"{f.sim / f.base - 1:+.1%}",
        ]
        for f in rep.figures
        if f.metric.startswith(TRACE_LABEL)
    ]
    print(f"{TRACE_LABEL} (past saturation; TPOT as ITL, latency as E2E):")
    print(report.table(["figure", "simulated", "measured", "error"], rows))


if __name__ == "__main__":
    import sys
    import time

    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 0.25
    started = time.perf_counter()
    outcomes = simulate_all(load_runs(), scale, extra=sys.argv[2:])
    print(table(outcomes))
    print(f"{time.perf_counter() - started:.1f} s")
