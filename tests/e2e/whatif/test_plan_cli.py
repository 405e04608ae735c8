"""`vllm-sim plan` run as a user runs it, in a subprocess: it prints the frontier and the
plan, writes plan.json, plan.csv and frontier.png into --out and nothing anywhere else, and
the plan it proposes holds up when replayed (the next-cheaper frontier point does not); an
SLO nobody meets exits 1 with the closest fleet; bad options exit 2 with one line."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.recorded_run import RECORDED_TRACE
from tests.support.server import run_cli

LLAMA_8B = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
LIMIT = "60"
SLO = "ttft_p99=125ms"
TTFT_LIMIT = 0.125
# Few candidates: the search takes about a second.
CHOICES = [
    "--tp", "1", "--max-num-seqs-choices", "64", "--max-num-batched-tokens-choices", "2048",
]  # fmt: skip
PLAN_FILES = {"plan.json", "plan.csv", "frontier.png"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HEADER = [
    "gpu",
    "tp",
    "max_num_seqs",
    "max_batched",
    "offload_gib",
    "replicas",
    "$/h",
    "ttft_p99",
    "failed",
    "meets",
]


Finished = subprocess.CompletedProcess[str]


def vllm_sim(cwd: Path, *args: str | Path) -> Finished:
    """`python -m vllm_sim ARGS` in `cwd`, its status and output."""
    return run_cli(args, cwd=cwd, timeout=120)


def tree(folder: Path) -> set[str]:
    """Every path under `folder`, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def plan_args(trace: Path, *extra: str, gpus: str = "H100,H200", slo: str = SLO) -> list[str]:
    return [
        "plan", "--trace", str(trace), "--slo", slo, "--gpu", gpus, *CHOICES,
        "--limit", LIMIT, "--workers", "2", *extra, *LLAMA_8B,
    ]  # fmt: skip


def one_line(run: Finished) -> str:
    """The single stderr line of a run refused with status 2 that wrote nothing."""
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("vllm-sim plan: "), lines
    assert "Traceback" not in run.stderr
    return lines[0]


@dataclass(frozen=True)
class Planned:
    run: Finished
    work: Path
    inputs: Path
    trace: Path
    report: dict[str, Any]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Planned:
    """One plan over H100 and H200 (TP 1, max-num-seqs 64, 2048 batched tokens), run in an
    empty working folder with the trace in a folder of its own."""
    root = tmp_path_factory.mktemp("plan")
    work, inputs = root / "work", root / "inputs"
    work.mkdir()
    inputs.mkdir()
    trace = inputs / "recorded.csv"
    trace.write_bytes(RECORDED_TRACE.read_bytes())
    run = vllm_sim(work, *plan_args(trace, "--out", "out"))
    report = json.loads((work / "out" / "plan.json").read_text()) if run.returncode == 0 else {}
    return Planned(run, work, inputs, trace, report)


def test_a_plan_says_each_candidate_as_it_is_searched(planned: Planned) -> None:
    """A line on stderr per candidate as its search ends: which, and its verdict, so a
    plan that takes half a minute is not silent meanwhile."""
    lines = [line for line in planned.run.stderr.splitlines() if "/2 " in line]
    assert len(lines) == 2
    assert {line.split()[3] for line in lines} == {"H100", "H200"}
    for line in lines:
        assert line.startswith("vllm-sim plan: ") and "TP1 (max-num-seqs 64" in line
        assert "meets the SLO with" in line or "misses the SLO up to" in line


def test_a_plan_names_what_it_was_made_from(planned: Planned) -> None:
    origin = planned.report["origin"]
    assert origin["trace"] == str(planned.trace)
    assert origin["trace_sha256"] == hashlib.sha256(planned.trace.read_bytes()).hexdigest()
    assert origin["command"].startswith(f"vllm-sim plan --trace {planned.trace} --slo")
    assert origin["version"]


def test_a_plan_prints_the_frontier_and_the_plan(planned: Planned) -> None:
    """Exit 0; stdout is the frontier table (header, one row per point, cheapest first),
    the `plan:` line naming the cheapest fleet that meets the SLO, and the report's path."""
    run = planned.run
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == HEADER
    rows = [line.split() for line in lines[1:] if line.split()[0] in ("H100", "H200")]
    assert len(rows) == len(planned.report["frontier"]) >= 2
    costs = [float(row[5]) for row in rows]
    assert costs == sorted(costs)
    best = planned.report["best"]
    plan_lines = [line for line in lines if line.startswith("plan: ")]
    assert plan_lines == [
        f"plan: {best['replicas']} x {best['candidate']['gpu']} TP1 (max-num-seqs 64, "
        f"max-num-batched-tokens 2048), ${best['cost_per_hour']:.2f}/h"
    ]
    assert lines[-1] == f"report: {Path('out') / 'plan.json'}"


def test_a_plan_writes_its_files_into_the_output_folder_only(planned: Planned) -> None:
    """The working folder gains `out` holding plan.json, plan.csv and frontier.png, nothing
    else; the trace's folder is untouched. The CSV is the printed frontier."""
    assert planned.run.returncode == 0, planned.run.stderr
    assert tree(planned.work) == {"out", *(f"out/{name}" for name in PLAN_FILES)}
    assert tree(planned.inputs) == {"recorded.csv"}
    out = planned.work / "out"
    assert (out / "frontier.png").read_bytes().startswith(PNG_SIGNATURE)
    with (out / "plan.csv").open(newline="") as handle:
        table = list(csv.reader(handle))
    assert table[0] == HEADER
    printed = [line.split() for line in planned.run.stdout.splitlines()[1 : len(table)]]
    assert table[1:] == printed
    report = planned.report
    assert report["slo"] == {"ttft_p99": TTFT_LIMIT}
    assert report["closest"] is None and report["skipped"] == []
    frontier = report["frontier"]
    assert [p["cost_per_hour"] for p in frontier] == sorted(p["cost_per_hour"] for p in frontier)
    assert report["best"] == next(p for p in frontier if p["meets"])


def replay_point(planned: Planned, point: dict[str, Any], out: Path) -> dict[str, Any]:
    """The frontier point's fleet replayed with `vllm-sim replay`: its result.json."""
    c = point["candidate"]
    run = vllm_sim(
        planned.work.parent,
        "replay", planned.trace, "--limit", LIMIT, "--quiet", "--no-plots", "--out", out,
        "--instances", str(point["replicas"]), "--router", "least-requests",
        *LLAMA_8B, "--timing-model", "roofline",
        "--gpu", c["gpu"], "--tensor-parallel-size", str(c["tensor_parallel"]),
        "--max-num-seqs", str(c["max_num_seqs"]),
        "--max-num-batched-tokens", str(c["max_num_batched_tokens"]),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result


def test_the_plans_fleet_meets_the_slo_when_replayed(planned: Planned, tmp_path: Path) -> None:
    """Replaying the best point's configuration on its replicas meets the SLO, every
    request served."""
    assert planned.run.returncode == 0, planned.run.stderr
    best = planned.report["best"]
    result = replay_point(planned, best, tmp_path / "best")
    assert result["summary"]["failed"] == 0
    assert result["means"]["ttft_p99"] <= TTFT_LIMIT
    assert result["means"]["ttft_p99"] == pytest.approx(best["metrics"]["ttft_p99"])


def test_the_next_cheaper_fleet_misses_the_slo_when_replayed(
    planned: Planned, tmp_path: Path
) -> None:
    """The frontier point just below the best in cost, replayed, misses the SLO."""
    assert planned.run.returncode == 0, planned.run.stderr
    best = planned.report["best"]
    cheaper = [p for p in planned.report["frontier"] if p["cost_per_hour"] < best["cost_per_hour"]]
    assert cheaper, planned.report["frontier"]
    result = replay_point(planned, cheaper[-1], tmp_path / "cheaper")
    assert result["means"]["ttft_p99"] > TTFT_LIMIT


def test_an_slo_nobody_meets_exits_1_with_the_closest_fleet(tmp_path: Path) -> None:
    """A 1 ms TTFT p99: status 1, `no fleet meets the SLO` and a `closest:` line saying by
    how much it misses; plan.json has no best and names the closest point."""
    run = vllm_sim(
        tmp_path,
        *plan_args(
            RECORDED_TRACE, "--max-replicas", "2", "--out", "out", slo="ttft_p99=1ms", gpus="H100"
        ),
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stdout.splitlines()
    assert "no fleet meets the SLO" in lines
    closest = [line for line in lines if line.startswith("closest: ")]
    assert len(closest) == 1
    assert closest[0].startswith(
        "closest: 2 x H100 TP1 (max-num-seqs 64, max-num-batched-tokens 2048): ttft_p99 "
    )
    assert closest[0].endswith("> 1.0 ms")
    assert not any(line.startswith("plan: ") for line in lines)
    report = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert report["best"] is None
    assert report["closest"]["replicas"] == 2


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slo", "named"),
    [
        ("ttft_p95=500ms", "'ttft_p95=500ms'"),
        ("ttft_p99", "'ttft_p99'"),
        ("ttft_p99=soon", "'ttft_p99=soon'"),
        (",", "the SLO sets no limit"),
        pytest.param("ttft_p99=0ms", "'ttft_p99=0ms'"),
    ],
)
def test_a_bad_slo_exits_2_with_one_line(tmp_path: Path, slo: str, named: str) -> None:
    """Nothing is replayed or written; the one line names the offending part."""
    run = vllm_sim(
        tmp_path, *plan_args(RECORDED_TRACE, "--max-replicas", "1", slo=slo, gpus="H100")
    )
    assert named in one_line(run)
    assert tree(tmp_path) == set()


def test_an_unknown_gpu_exits_2_with_one_line(tmp_path: Path) -> None:
    """An unknown GPU in --gpu: status 2, one line naming it, nothing written."""
    run = vllm_sim(tmp_path, *plan_args(RECORDED_TRACE, gpus="H100,B300"))
    assert "unknown GPU 'B300'" in one_line(run)
    assert tree(tmp_path) == set()


@pytest.mark.parametrize(
    "cost",
    [
        "H100=abc",
        "H100=0",
        "H100=-2",
        "H100",
        pytest.param("H100=nan"),
        pytest.param("H100=inf"),
    ],
)
def test_a_bad_gpu_cost_exits_2_with_one_line(tmp_path: Path, cost: str) -> None:
    """A --gpu-cost part that is not GPU=DOLLARS with a positive number: status 2, one line
    quoting the part, nothing written."""
    run = vllm_sim(
        tmp_path, *plan_args(RECORDED_TRACE, "--gpu-cost", cost, "--max-replicas", "1", gpus="H100")
    )
    assert f"--gpu-cost {cost!r}" in one_line(run)
    assert tree(tmp_path) == set()


@pytest.mark.parametrize("sizes", ["abc", "-1", "nan", "100000"])
def test_bad_offload_sizes_exit_2_with_one_line(tmp_path: Path, sizes: str) -> None:
    """--kv-offloading-size-choices takes GiB sizes from 0 to 16,384: anything else is
    status 2, one line naming the flag, nothing written."""
    run = vllm_sim(
        tmp_path,
        *plan_args(RECORDED_TRACE, "--kv-offloading-size-choices", sizes, gpus="H100"),
    )
    assert "--kv-offloading-size-choices" in one_line(run)
    assert tree(tmp_path) == set()


def gpu_file(folder: Path, text: str) -> Path:
    path = folder / "gpu.yaml"
    path.write_text(text)
    return path


NEW_GPU = "name: MyGPU\nbf16_tflops: 500\nmemory_gb: 80\nbandwidth_tbps: 2.0\n"


def test_a_gpu_without_a_cost_exits_2_with_one_line(tmp_path: Path) -> None:
    """A GPU that --gpu-spec-file defines has no cost per hour: without --gpu-cost the plan
    is refused with one line naming it."""
    work = tmp_path / "work"
    work.mkdir()
    spec = gpu_file(tmp_path, NEW_GPU)
    run = vllm_sim(work, *plan_args(RECORDED_TRACE, "--gpu-spec-file", str(spec), gpus="MyGPU"))
    assert "MyGPU" in one_line(run)
    assert tree(work) == set()


def test_a_gpu_the_spec_file_defines_is_planned_with_its_gpu_cost(tmp_path: Path) -> None:
    """With --gpu-cost MyGPU=2, a GPU defined by --gpu-spec-file is planned at $2 a GPU-hour;
    without it, the one line says to give one with --gpu-cost."""
    spec = gpu_file(tmp_path, NEW_GPU)
    refused = vllm_sim(
        tmp_path, *plan_args(RECORDED_TRACE, "--gpu-spec-file", str(spec), gpus="MyGPU")
    )
    assert "--gpu-cost" in one_line(refused)
    run = vllm_sim(
        tmp_path,
        *plan_args(
            RECORDED_TRACE,
            "--gpu-spec-file",
            str(spec),
            "--gpu-cost",
            "MyGPU=2",
            "--max-replicas",
            "2",
            "--out",
            "out",
            slo="ttft_p99=10s",
            gpus="MyGPU",
        ),
    )
    assert run.returncode == 0, run.stderr
    assert "plan: 1 x MyGPU TP1" in run.stdout and "$2.00/h" in run.stdout


def test_a_spec_files_cost_per_hour_is_the_plans_cost(tmp_path: Path) -> None:
    """A --gpu-spec-file giving H100 a cost of $10 an hour prices the plan at $10."""
    spec = gpu_file(tmp_path, "cost_per_hour: 10.0\n")
    run = vllm_sim(
        tmp_path,
        *plan_args(
            RECORDED_TRACE,
            "--gpu-spec-file",
            str(spec),
            "--max-replicas",
            "1",
            "--out",
            "out",
            slo="ttft_p99=10s",
            gpus="H100",
        ),
    )
    assert run.returncode == 0, run.stderr
    assert "$10.00/h" in run.stdout
