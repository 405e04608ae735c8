"""Calibration's fit: a run the simulator made with known coefficients gives them back
within 5%; fitted on half of the recorded RTX PRO 6000 run, the other half replays within
5% mean TPOT and 10% mean TTFT; a coefficient the run does not depend on keeps its value;
/metrics scrapes and a closed-loop benchmark calibrate too."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.recorded_run import RECORDED_TRACE
from tests.support.synthetic_run import (
    KNOWN,
    SYNTHETIC_SERVER,
    bench_serve_result,
    metrics_scrapes,
    steady_trace,
    synthetic_config,
    synthetic_records,
    synthetic_trace,
    write_requests_jsonl,
)
from vllm_sim.config import load_config
from vllm_sim.whatif.calibrate import DEFAULT_FIT, Calibration, parse_fit, split
from vllm_sim.whatif.measurements import read_measurements
from vllm_sim.whatif.trace import Trace

# The recorded run's server as the issue describes it (the replay's own flags besides).
RTX_SERVER = [
    "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX-PRO-6000",
    "--timing-model", "roofline", "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
    "--num-gpu-blocks-override", "35913",
]  # fmt: skip


def test_fit_names_are_checked() -> None:
    assert parse_fit("api_server_s, compute_efficiency,api_server_s") == (
        "api_server_s",
        "compute_efficiency",
    )
    with pytest.raises(ValueError, match="unknown coefficient 'bandwidth_tbps'; known: "):
        parse_fit("weight_bandwidth_efficiency,bandwidth_tbps")
    with pytest.raises(ValueError, match="names no coefficient"):
        parse_fit(" , ")


def test_the_holdout_is_a_seeded_random_share() -> None:
    fit, held = split(10, 0.5, 0)
    assert len(fit) == len(held) == 5 and sorted(fit + held) == list(range(10))
    assert split(10, 0.5, 0) == (fit, held)
    assert split(10, 0.5, 1) != (fit, held)
    assert split(10, 0.0, 0) == (list(range(10)), [])


def test_a_run_made_with_known_coefficients_gives_them_back_within_5_percent(
    tmp_path: Path,
) -> None:
    """The issue's first acceptance check: measurements the simulator made with
    weight_bandwidth_efficiency 0.62, kv_bandwidth_efficiency 0.55, compute_efficiency
    0.5 and api_server_s 12 ms (every one away from the GPU's default), calibrated from the
    defaults, recover each within 5%, and the means within 1%."""
    records = synthetic_records(synthetic_trace())
    measured = read_measurements(write_requests_jsonl(records, tmp_path / "run.jsonl"))
    result = Calibration(synthetic_config(), measured, DEFAULT_FIT).run()
    assert result.fitted == DEFAULT_FIT and not result.kept
    assert result.before != pytest.approx(KNOWN, rel=0.05)  # something to find
    for name, known in KNOWN.items():
        assert result.after[name] == pytest.approx(known, rel=0.05), name
    after = result.errors_after["fit"]
    assert after.ttft_mean == pytest.approx(0.0, abs=0.01)
    assert after.tpot_mean == pytest.approx(0.0, abs=0.01)


def test_half_the_recorded_run_calibrates_the_other_half() -> None:
    """The issue's second acceptance check: fitted on a random half of the RTX PRO 6000
    run's requests (the whole run replayed, since requests share steps), the held-out half
    replays within 5% mean TPOT and 10% mean TTFT, closer than before the fit
    (bench/calibration.py prints the same figures)."""
    measured = read_measurements(RECORDED_TRACE)
    result = Calibration(load_config(RTX_SERVER, {}), measured, holdout=0.5, seed=0).run()
    assert (result.fit_units, result.holdout_units) == (150, 150)
    before, after = result.errors_before["holdout"], result.errors_after["holdout"]
    assert after.tpot_mean is not None and after.ttft_mean is not None
    assert abs(after.tpot_mean) <= 0.05
    assert abs(after.ttft_mean) <= 0.10
    assert before.tpot_mean is not None and before.ttft_mean is not None
    assert abs(after.tpot_mean) < abs(before.tpot_mean)
    assert abs(after.ttft_mean) < abs(before.ttft_mean)


def test_a_coefficient_the_run_does_not_depend_on_keeps_its_value(tmp_path: Path) -> None:
    """One GPU makes no all-reduce: allreduce_s moves no latency, is not fitted, and
    keeps the GPU's value, with the reason."""
    records = synthetic_records(synthetic_trace(quiet=20, burst=10))
    measured = read_measurements(write_requests_jsonl(records, tmp_path / "run.jsonl"))
    result = Calibration(synthetic_config(), measured, ("allreduce_s",)).run()
    assert result.fitted == ()
    assert result.after == result.before
    assert "not identifiable from these measurements" in result.kept["allreduce_s"]
    assert result.evaluations == 2  # the defaults, and one derivative


def test_metrics_scrapes_calibrate_the_interval_means(tmp_path: Path) -> None:
    """Scrapes every 4 s of a steady run made with known coefficients: the workload is
    rebuilt from the counters (each interval's requests alike), and the fit brings the
    intervals' mean TTFT and inter-token latency within 2% (the coefficients themselves
    are only as good as a workload of means allows)."""
    records = synthetic_records(steady_trace())
    measured = read_measurements(metrics_scrapes(records, 4.0, tmp_path / "metrics.txt"))
    assert measured.completed == len(records)
    calibration = Calibration(synthetic_config(), measured)
    result = calibration.run()
    before, after = result.errors_before["fit"], result.errors_after["fit"]
    assert calibration.targets.unit_name == "intervals"
    assert before.ttft_mean is not None and before.tpot_mean is not None
    assert after.ttft_mean is not None and after.tpot_mean is not None
    assert abs(after.ttft_mean) < min(0.02, abs(before.ttft_mean) + 1e-9)
    assert abs(after.tpot_mean) < min(0.02, abs(before.tpot_mean) + 1e-9)


def test_a_closed_loop_benchmark_without_send_times_is_replayed_closed_loop(
    tmp_path: Path,
) -> None:
    """vllm bench serve at an infinite rate and --max-concurrency 4, saved without
    start_times: the replay keeps at most 4 requests open, as the benchmark's client did
    (its TTFTs leave out the client's wait: all 40 sent at once would queue for seconds),
    and with the other coefficients known, the weights' bandwidth is found."""
    at_once = Trace([replace(r, arrival=0.0) for r in synthetic_trace(quiet=0, burst=40).requests])
    records = synthetic_records(at_once, max_concurrency=4)
    path = tmp_path / "bench.json"
    path.write_text(
        json.dumps(bench_serve_result(records, "inf", start_times=False, max_concurrency=4))
    )
    measured = read_measurements(path)
    assert measured.max_concurrency == 4 and {r.arrival for r in measured.requests} == {0.0}
    others = {k: v for k, v in KNOWN.items() if k != "weight_bandwidth_efficiency"}
    spec = tmp_path / "gpu.json"
    spec.write_text(json.dumps(others))
    cfg = load_config([*SYNTHETIC_SERVER, "--gpu-spec-file", str(spec)], {})
    result = Calibration(cfg, measured, ("weight_bandwidth_efficiency",)).run()
    after = result.errors_after["fit"]
    assert after.tpot_mean is not None and abs(after.tpot_mean) < 0.01
    assert after.ttft_mean is not None and abs(after.ttft_mean) < 0.01
    assert result.after["weight_bandwidth_efficiency"] == pytest.approx(0.62, rel=0.02)
