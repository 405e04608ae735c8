"""`vllm-sim plan --ray local`: the search's candidates as tasks of a local Ray instance,
with the same plan as the local process pool. Needs the optional `ray` extra: skipped
where Ray is not installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.recorded_run import RECORDED_TRACE
from tests.support.server import run_cli

pytest.importorskip("ray")

PLAN = [
    "plan", "--trace", str(RECORDED_TRACE), "--limit", "60", "--slo", "ttft_p99=1s,itl_p99=40ms",
    "--gpu", "H100,L40S", "--tp", "1", "--max-num-seqs-choices", "128",
    "--max-num-batched-tokens-choices", "2048", "--no-plots",
    "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192",
]  # fmt: skip


def _plan(tmp_path: Path, name: str, *extra: str) -> dict[str, object]:
    out = tmp_path / name
    done = run_cli([*PLAN, "--out", str(out), *extra], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads((out / "plan.json").read_text())
    return result


def test_ray_finds_the_plan_the_process_pool_finds(tmp_path: Path) -> None:
    """The same trace, SLO and candidates: the same best point and frontier either way."""
    on_ray = _plan(tmp_path, "ray", "--ray", "local")
    local = _plan(tmp_path, "local", "--workers", "2")
    assert on_ray["best"] == local["best"]
    assert on_ray["frontier"] == local["frontier"]
