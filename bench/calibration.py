"""16. Calibration: `vllm-sim calibrate`'s fit against what it must find, on a virtual clock.

- Known coefficients: a run the simulator itself makes (Llama-3.1-8B on an H100, 100
  requests, quiet then bursting) with weight_bandwidth_efficiency 0.62,
  kv_bandwidth_efficiency 0.55, compute_efficiency 0.5 and api_server_s 12 ms, calibrated
  from the GPU's defaults: each coefficient recovered beside the one it was made with.
- Holdout: LLMServingSim's recorded vLLM run (300 requests on an RTX PRO 6000, the trace of
  benchmark 8) fitted on a random half of its requests, the whole run replayed each time;
  the other half's mean TTFT, TPOT and latency with the defaults and with the fitted
  coefficients, beside the measured ones (the issue's bar: within 5% TPOT, 10% TTFT).

Nothing here starts a server: each replay runs on the virtual clock.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench import report
from bench.options import Options
from bench.report import BenchReport, Figure
from tests.support.recorded_run import RECORDED_TRACE
from tests.support.synthetic_run import (
    KNOWN,
    synthetic_config,
    synthetic_records,
    synthetic_trace,
    write_requests_jsonl,
)
from vllm_sim.config import load_config
from vllm_sim.whatif.calibrate import Calibration, Errors, FitResult
from vllm_sim.whatif.measurements import Measurements, read_measurements

NAME = "calibration"
RTX_SERVER = [
    "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX-PRO-6000",
    "--timing-model", "roofline", "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
    "--num-gpu-blocks-override", "35913",
]  # fmt: skip
_MEANS = (
    ("ttft", "ttft_mean", "mean TTFT"),
    ("tpot", "tpot_mean", "mean TPOT"),
    ("e2e", "e2e_mean", "mean latency"),
)


def recover_known() -> FitResult:
    """The synthetic run's coefficients, calibrated from the defaults."""
    records = synthetic_records(synthetic_trace())
    with tempfile.TemporaryDirectory() as folder:
        measured = read_measurements(write_requests_jsonl(records, Path(folder) / "run.jsonl"))
    return Calibration(synthetic_config(), measured).run()


def holdout_fit(workers: int = 1) -> tuple[FitResult, Measurements, list[int]]:
    """The recorded run fitted on half its requests: the result, the measurements and the
    held-out requests' indices."""
    measured = read_measurements(RECORDED_TRACE)
    calibration = Calibration(
        load_config(RTX_SERVER, {}), measured, holdout=0.5, seed=0, workers=workers
    )
    return calibration.run(), measured, calibration.holdout_set


def measured_means(measured: Measurements, rows: list[int]) -> dict[str, float]:
    """The measured means (seconds) over the requests `rows`."""
    chosen = [measured.requests[i] for i in rows]
    tpots = [r.tpot for r in chosen if r.tpot is not None]
    return {
        "ttft": sum(r.ttft for r in chosen) / len(chosen),
        "tpot": sum(tpots) / len(tpots),
        "e2e": sum(r.e2e for r in chosen) / len(chosen),
    }


def _simulated(errors: Errors, attr: str, measured: float) -> float:
    error = getattr(errors, attr)
    return measured * (1.0 + error) if error is not None else 0.0


def run(opts: Options) -> BenchReport:
    rep = BenchReport(NAME, "16. Calibration: recovered coefficients, and a holdout's errors")
    known = recover_known()
    for name, value in KNOWN.items():
        rep.figures.append(
            Figure(NAME, f"recovered {name}", known.after[name], value, higher_is_better=False)
        )
    fitted, measured, held = holdout_fit()
    means = measured_means(measured, held)
    for key, attr, label in _MEANS:
        for stage, errors in (("defaults", fitted.errors_before), ("fitted", fitted.errors_after)):
            rep.figures.append(
                Figure(
                    NAME,
                    f"holdout {label} ms, {stage}",
                    1000 * _simulated(errors["holdout"], attr, means[key]),
                    1000 * means[key],
                    higher_is_better=False,
                )
            )
    after = fitted.errors_after["holdout"]
    if after.tpot_mean is None or abs(after.tpot_mean) > 0.05:
        rep.problems.append(f"holdout mean TPOT off by {after.tpot_mean}: over 5%")
    if after.ttft_mean is None or abs(after.ttft_mean) > 0.10:
        rep.problems.append(f"holdout mean TTFT off by {after.ttft_mean}: over 10%")
    for name, value in KNOWN.items():
        if abs(known.after[name] / value - 1) > 0.05:
            rep.problems.append(f"{name} recovered as {known.after[name]:.4g}, not {value}")
    return rep


def show(rep: BenchReport) -> None:
    known = [f for f in rep.figures if f.metric.startswith("recovered ")]
    rows = [
        [name, f"{f.base:.4g}", f"{f.sim:.4g}", f"{f.ratio - 1:+.2%}"]
        for f in known
        for name in [f.metric.removeprefix("recovered ")]
    ]
    print(report.table(["coefficient", "made with", "recovered", "error"], rows))
    by_metric: dict[str, dict[str, float]] = {}
    measured: dict[str, float] = {}
    for f in rep.figures:
        if f.metric.startswith("holdout "):
            label, stage = f.metric.removeprefix("holdout ").rsplit(", ", 1)
            by_metric.setdefault(label, {})[stage] = f.sim
            measured[label] = f.base
    rows = []
    for label, stages in by_metric.items():
        base = measured[label]
        rows.append(
            [
                label,
                f"{base:.1f}",
                f"{stages['defaults']:.1f} ({stages['defaults'] / base - 1:+.1%})",
                f"{stages['fitted']:.1f} ({stages['fitted'] / base - 1:+.1%})",
            ]
        )
    print("  the held-out half of the recorded RTX PRO 6000 run:")
    print(report.table(["figure", "measured", "defaults", "fitted"], rows))
