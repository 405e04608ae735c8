"""Fits the step model's coefficients (perf/gpus.py's H100 defaults) to the calibration set.

    python -m bench.fit_step_model [SCALE]

Replays every run of `data/s2r/s2r-trainval.json` (sim_to_real.py) with candidate
coefficients and minimises, with scipy's least_squares (soft-L1 loss, every coefficient
within its physical bound), the log ratio of simulated to measured whole-run means: TTFT,
ITL and E2E of each run. For two runs (Llama-2-7B) the measured ITL is about 1/0.78 of
the time per decode step their E2E implies: their client counted about 78% of the tokens
the server generated (every other run counts 98-100%); the E2E term keeps those runs'
decode time right, and the loss's small scale keeps their ITL from pulling the others.
Runs replay at SCALE of their length (default a quarter; a tenth biases the fit with
warm-up). Starts from perf/gpus.py's H100 values; prints the fitted values and the table.
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
    # Fused MoE kernels split a step's tokens over the experts: at prefill sizes each
    # expert's matmul is a few dozen rows, padded to the tensor cores' tiles.
    "moe_compute_efficiency": (0.1, 0.85),
    "step_overhead_s": (0.0, 5e-3),
    "layer_overhead_s": (0.0, 30e-6),
    "moe_layer_overhead_s": (0.0, 300e-6),
    "prefill_layer_overhead_s": (0.0, 300e-6),
    "per_request_overhead_s": (0.0, 50e-6),
    "allreduce_s": (0.0, 60e-6),
    "api_server_s": (0.0, 20e-3),
    "api_server_s_per_token": (0.0, 60e-6),
}
# Parameters are searched in these units so every one moves on a comparable scale.
UNITS: dict[str, float] = {name: 1.0 if name.endswith("efficiency") else 1e-6 for name in BOUNDS}


def residuals(outcomes: Sequence[Outcome]) -> list[float]:
    """log(simulated / measured) of each run's whole-run mean TTFT, ITL and E2E: the
    figures the calibration set is judged by. Soft-L1 with a small scale makes the fit
    close to a least-absolute one, so that a run the model cannot follow (the two Llama-2
    runs' ITL, whose client counted fewer tokens than the server made; Llama-4-Scout's
    TTFT) pulls the others less."""
    values: list[float] = []
    for outcome in outcomes:
        for metric in ("ttft_mean", "itl_mean", "e2e_mean"):
            simulated = outcome.simulated[metric]
            if math.isnan(simulated):
                values.append(2.0)  # no finished request: far off
            else:
                values.append(math.log(simulated / outcome.run.real[metric]))
    return values


def fit(scale: float) -> dict[str, float]:
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
        r = np.array(residuals(outcomes))
        print(f"  cost {0.5 * float(r @ r):.4f}", flush=True)
        return r

    solution = least_squares(
        cost, x0, bounds=(lower, upper), loss="soft_l1", f_scale=0.05, diff_step=0.02
    )
    fitted = coefficients(solution.x)
    for name, value in fitted.items():
        print(f"{name:30} {value:.6g}")
    print(table(simulate_all(runs, 1.0, coefficients=fitted)))
    return fitted


if __name__ == "__main__":
    fit(float(sys.argv[1]) if len(sys.argv) > 1 else 0.25)
