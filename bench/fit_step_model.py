"""Fits the step model's coefficients (perf/gpus.py's H100 defaults) to the calibration set.

    python -m bench.fit_step_model [SCALE]

Two steps, as the defaults were made:
1. Replays every run of `data/s2r/s2r-trainval.json` (sim_to_real.py) with candidate
   coefficients and minimises, with scipy's least_squares (soft-L1 loss, every coefficient
   within its physical bound), the log ratio of simulated to measured values of each
   stage: its mean TTFT, and its time per output token taken from the measured means as
   (E2E - TTFT) / (out - 1). That decode target rather than the measured ITL: for two runs
   (Llama-2-7B) the client counted about 78% of the tokens the server made (every other
   run 98-100%), so their measured ITL reads about 1/0.78 of the time per decode step.
   Runs replay at SCALE of their length (default a quarter; a tenth biases the fit with
   warm-up); the search starts from the current defaults.
2. Holds the MoE experts' compute efficiency at its physical floor of 0.1 where the fit
   went below it (the calibration set's one MoE model, Llama-4-Scout, prefills far slower
   than its FLOPs say), and refits the per-MoE-layer time by a scan at full length, by the
   least absolute log error of the whole-run TTFT, ITL and E2E.
Prints each step's values and the full-length table.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np
from scipy.optimize import least_squares

from bench.sim_to_real import Outcome, load_runs, simulate_all, table
from vllm_sim.perf.gpus import GPUS

# Coefficient -> (lower, upper). Efficiencies are fractions of a datasheet peak; compute
# stops at 0.85, about what large cuBLAS GEMMs reach on an H100; overheads are not negative.
BOUNDS: dict[str, tuple[float, float]] = {
    "weight_bandwidth_efficiency": (0.5, 0.9),
    "kv_bandwidth_efficiency": (0.3, 0.9),
    "compute_efficiency": (0.3, 0.85),
    "moe_compute_efficiency": (0.05, 0.85),
    "step_overhead_s": (0.0, 5e-3),
    "layer_overhead_s": (0.0, 30e-6),
    "moe_layer_overhead_s": (0.0, 300e-6),
    "prefill_layer_overhead_s": (0.0, 300e-6),
    "per_request_overhead_s": (0.0, 50e-6),
    "allreduce_s": (0.0, 60e-6),
    "api_server_s": (0.0, 20e-3),
    "api_server_s_per_token": (0.0, 60e-6),
}
# Fused MoE kernels split a step's tokens over the experts: at prefill sizes each
# expert's matmul is a few dozen rows, padded to the tensor cores' tiles; below a tenth of
# the peak is no kernel's.
MOE_EFFICIENCY_FLOOR = 0.1
MOE_LAYER_SCAN = (30e-6, 40e-6, 50e-6, 60e-6, 70e-6, 80e-6)
# Parameters are searched in these units so every one moves on a comparable scale.
UNITS: dict[str, float] = {name: 1.0 if name.endswith("efficiency") else 1e-6 for name in BOUNDS}
METRICS = ("ttft_mean", "itl_mean", "e2e_mean")


def decode_time(e2e: float, ttft: float, out: int) -> float:
    """Time per output token after the first, from whole-request means."""
    return (e2e - ttft) / max(out - 1, 1)


def stage_residuals(outcomes: Sequence[Outcome]) -> list[float]:
    """log(simulated / measured) of each stage's TTFT and decode time."""
    values: list[float] = []
    for outcome in outcomes:
        run = outcome.run
        for real, sim in zip(run.stages_real, outcome.stages, strict=True):
            if any(math.isnan(v) for v in sim.values()):
                values += [2.0, 2.0]  # a stage with no finished request: far off
                continue
            values.append(math.log(sim["ttft_mean"] / real["ttft_mean"]))
            real_tpot = decode_time(real["e2e_mean"], real["ttft_mean"], run.output_tokens)
            sim_tpot = decode_time(sim["e2e_mean"], sim["ttft_mean"], run.output_tokens)
            values.append(math.log(sim_tpot / real_tpot))
    return values


def whole_run_error(outcomes: Sequence[Outcome]) -> float:
    """The sum of |log(simulated / measured)| of every run's whole-run means."""
    return sum(
        abs(math.log(o.simulated[m] / o.run.real[m])) if not math.isnan(o.simulated[m]) else 2.0
        for o in outcomes
        for m in METRICS
    )


def fit_stages(scale: float) -> dict[str, float]:
    runs = load_runs()
    start = GPUS["H100"]
    names = list(BOUNDS)
    x0 = np.array([getattr(start, n) / UNITS[n] for n in names])
    lower = np.array([BOUNDS[n][0] / UNITS[n] for n in names])
    upper = np.array([BOUNDS[n][1] / UNITS[n] for n in names])
    x0 = np.clip(x0, lower, upper)

    def coefficients(x: np.ndarray) -> dict[str, float]:
        return {n: float(v) * UNITS[n] for n, v in zip(names, x, strict=True)}

    def cost(x: np.ndarray) -> np.ndarray:
        outcomes = simulate_all(runs, scale, coefficients=coefficients(x))
        r = np.array(stage_residuals(outcomes))
        print(f"  cost {0.5 * float(r @ r):.4f}", flush=True)
        return r

    solution = least_squares(
        cost, x0, bounds=(lower, upper), loss="soft_l1", f_scale=0.1, diff_step=0.02
    )
    return coefficients(solution.x)


def refit_moe_layer(fitted: dict[str, float]) -> dict[str, float]:
    runs = load_runs()
    held = {
        **fitted,
        "moe_compute_efficiency": max(fitted["moe_compute_efficiency"], MOE_EFFICIENCY_FLOOR),
    }
    errors = {}
    for value in MOE_LAYER_SCAN:
        outcomes = simulate_all(runs, 1.0, coefficients={**held, "moe_layer_overhead_s": value})
        errors[value] = whole_run_error(outcomes)
        print(f"  moe_layer_overhead_s {value * 1e6:.0f} us: {errors[value]:.3f}", flush=True)
    return {**held, "moe_layer_overhead_s": min(errors, key=errors.__getitem__)}


def main(scale: float) -> dict[str, float]:
    fitted = refit_moe_layer(fit_stages(scale))
    for name, value in fitted.items():
        print(f"{name:30} {value:.6g}")
    print(table(simulate_all(load_runs(), 1.0, coefficients=fitted)))
    return fitted


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.25)
