"""`vllm-sim replay --target URL`: a trace sent over HTTP to a live simulator, each answer
timed as a client sees it, written in the same shapes as a simulated replay; a target
that cannot be reached is one line and status 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.server import SimServer, free_port, run_cli
from vllm_sim.whatif.http_replay import parse_gauges


def replay(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_cli(["replay", *args], cwd=cwd, timeout=60)


def write_trace(path: Path) -> Path:
    """Three Mooncake requests 50 ms apart, the first two sharing their first block."""
    lines = [
        {"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]},
        {"timestamp": 50, "input_length": 600, "output_length": 6, "hash_ids": [1, 2]},
        {"timestamp": 100, "input_length": 32, "output_length": 1, "hash_ids": [3]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_trace_replayed_against_a_live_simulator(tmp_path: Path) -> None:
    """Every request is answered with its traced output length, timed from the client
    (TTFT at least the server's 20 ms), and the run is written as an "http" run whose
    means compare with a simulated replay's."""
    trace = write_trace(tmp_path / "trace.jsonl")
    with SimServer(["--time-to-first-token", "20ms", "--inter-token-latency", "2ms"]) as sim:
        run = replay(tmp_path, trace, "--quiet", "--no-plots", "--out", "http", "--target", sim.url)
    assert run.returncode == 0, run.stderr
    assert "3 requests: 3 completed, 0 failed" in run.stdout
    result = json.loads((tmp_path / "http" / "result.json").read_text())
    assert result["kind"] == "http"
    assert result["settings"]["model"] == "test-model"
    assert result["settings"]["target"] == sim.url
    assert result["summary"]["latencies"]["ttft"]["count"] == 3
    assert result["summary"]["latencies"]["ttft"]["p50"] >= 0.019
    assert result["samples"], "the fleet was sampled from /metrics"
    rows = (tmp_path / "http" / "requests.csv").read_text().splitlines()[1:]
    assert [row.split(",")[5] for row in rows] == ["4", "6", "1"]  # output_tokens

    simulated = replay(
        tmp_path, trace, "--quiet", "--no-plots", "--out", "sim", "--model", "test-model"
    )
    assert simulated.returncode == 0, simulated.stderr
    compared = run_cli(["compare", "sim", "http"], cwd=tmp_path, timeout=60)
    assert compared.returncode == 0, compared.stderr
    assert "ttft_mean" in compared.stdout


def test_an_unreachable_target_exits_2_with_one_line(tmp_path: Path) -> None:
    """Nothing listens on the target's port: status 2 and one line on stderr."""
    trace = write_trace(tmp_path / "trace.jsonl")
    target = f"http://127.0.0.1:{free_port()}"
    run = replay(tmp_path, trace, "--quiet", "--no-plots", "--out", "out", "--target", target)
    assert run.returncode == 2
    assert len(run.stderr.splitlines()) == 1


def test_fleet_gauges_are_read_from_a_prometheus_exposition() -> None:
    """One value per labelled series of the four fleet gauges; other lines, comments and
    unreadable values are passed over."""
    text = "\n".join(
        [
            "# HELP vllm:num_requests_running Running requests.",
            'vllm:num_requests_running{model_name="m",engine="0"} 3.0',
            'vllm:num_requests_running{model_name="m",engine="1"} 2.0',
            'vllm:num_requests_waiting{model_name="m"} 7.0',
            'vllm:kv_cache_usage_perc{model_name="m"} 0.25',
            'vllm:num_preemptions_total{model_name="m"} 4.0',
            'vllm:num_requests_waiting{model_name="m"} oops',
            'vllm:prompt_tokens_total{model_name="m"} 100.0',
            "process_cpu_seconds_total 1.5",
        ]
    )
    assert parse_gauges(text) == {
        "running": [3.0, 2.0],
        "waiting": [7.0],
        "kv_usage": [0.25],
        "preemptions": [4.0],
    }
