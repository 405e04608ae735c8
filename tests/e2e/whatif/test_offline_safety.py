"""The offline commands' writes and interrupts, run as a user runs them (subprocesses):

- the output folder is checked before anything is computed: a symbolic link as --out is
  refused, a place that cannot hold a folder is one line before the trace is even read
  (no "skipped line" from reading it), and a link planted at a result's name inside the
  folder is replaced by the file, its target untouched;
- SIGINT or SIGTERM stops `replay` and `plan` within about a second of wall-clock time
  (asserted with slack for a busy shared machine), which then write a partial result
  marked as such, say so in one line, and leave no process behind (plan's workers
  included, even when the parent is killed outright).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.server import run_cli

SMALL_SERVER = ["--model", "test-model", "--max-model-len", "2048"]
LLAMA_8B = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
# Seconds from the signal to the exit: the aim is one; the rest is slack for a shared,
# busy machine (wall-clock time, interpreter shutdown included).
STOP_BOUND = 3.0


def mooncake(path: Path, count: int, gap_ms: int = 100, bad_line: bool = False) -> Path:
    lines = [
        json.dumps(
            {"timestamp": gap_ms * i, "input_length": 200, "output_length": 60, "hash_ids": [i]}
        )
        for i in range(count)
    ]
    if bad_line:
        lines.insert(1, "{not json")
    path.write_text("\n".join(lines) + "\n")
    return path


def one_line(run: subprocess.CompletedProcess[str], prog: str) -> str:
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"vllm-sim {prog}: "), lines
    return lines[0]


# --- writes ------------------------------------------------------------------------------


def test_a_symlinked_out_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").symlink_to(elsewhere)
    trace = mooncake(tmp_path / "t.jsonl", 4)
    run = run_cli(["replay", trace, "--out", tmp_path / "out", "--quiet", *SMALL_SERVER])
    assert "symbolic link" in one_line(run, "replay")
    assert list(elsewhere.iterdir()) == []


def test_a_link_inside_the_folder_is_replaced_never_written_through(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "requests.csv").symlink_to(precious)
    (out / "result.json").symlink_to(precious)
    trace = mooncake(tmp_path / "t.jsonl", 4)
    run = run_cli(["replay", trace, "--out", out, "--quiet", "--no-plots", *SMALL_SERVER])
    assert run.returncode == 0, run.stderr
    assert precious.read_text() == "keep me\n"
    for name in ("requests.csv", "result.json"):
        assert not (out / name).is_symlink()
    assert len((out / "requests.csv").read_text().splitlines()) == 5
    assert not list(out.glob(".*partial"))


@pytest.mark.parametrize("prog", ["replay", "plan", "calibrate"])
def test_an_out_that_cannot_be_made_is_one_line_before_any_compute(
    tmp_path: Path, prog: str
) -> None:
    """--out below a regular file: refused before the trace is read (its bad line would
    be reported) and before any replay."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    trace = mooncake(tmp_path / "t.jsonl", 4, bad_line=True)
    out = blocker / "out"
    args: list[str | Path]
    if prog == "replay":
        args = ["replay", trace, "--out", out, "--quiet", *SMALL_SERVER]
    elif prog == "plan":
        args = ["plan", "--trace", trace, "--slo", "ttft_p99=1s", "--gpu", "H100", "--out", out]
        args += LLAMA_8B
    else:
        args = ["calibrate", trace, "--out", out / "profile.yaml", *LLAMA_8B]
    started = time.monotonic()
    run = run_cli(args)
    line = one_line(run, prog)
    assert "skipped" not in line and str(blocker) in line
    assert time.monotonic() - started < 20


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only mode folder")
def test_a_read_only_out_is_one_line_before_any_compute(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    trace = mooncake(tmp_path / "t.jsonl", 4, bad_line=True)
    try:
        run = run_cli(["replay", trace, "--out", out, "--quiet", *SMALL_SERVER])
    finally:
        out.chmod(0o700)
    assert "not writable" in one_line(run, "replay")


# --- interrupts --------------------------------------------------------------------------


def _marked(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (forked workers share it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if marker.encode() in cmdline and "\nState:\tZ" not in status:
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _reaper(tmp_path: Path) -> Iterator[None]:
    """Whatever a failing run left behind (orphaned workers) is killed after the test."""
    yield
    for pid in _marked(str(tmp_path)):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _start(args: Sequence[str | Path], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vllm_sim", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen[str], number: int) -> tuple[float, str, str]:
    """Sends `number`; the seconds until the exit, and the output."""
    sent = time.monotonic()
    process.send_signal(number)
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"did not stop: {err[-2000:]}") from None
    return time.monotonic() - sent, out, err


def _streamed_rows(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) - 1 for p in out.glob(".requests.csv.*.partial"))


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_replay_writes_a_partial_result(tmp_path: Path, number: int) -> None:
    """A replay of minutes: once requests.csv is streaming rows, the signal stops it within
    the bound; result.json says partial, the summary says so first, one stderr line
    says so, requests.csv holds the requests so far, and no process is left."""
    out = tmp_path / "out"
    trace = mooncake(tmp_path / "long.jsonl", 200_000, gap_ms=20)
    process = _start(["replay", trace, "--out", out, "--quiet", *SMALL_SERVER], tmp_path)
    _wait_for(lambda: out.is_dir() and _streamed_rows(out) >= 2, "streamed rows")
    seconds, stdout, stderr = _stop(process, number)
    assert seconds < STOP_BOUND, (seconds, stderr)
    assert process.returncode == 128 + number, stderr
    said = [line for line in stderr.splitlines() if "interrupted" in line]
    assert len(said) == 1 and "partial result" in said[0], stderr
    assert "Traceback" not in stderr
    result = json.loads((out / "result.json").read_text())
    assert result["partial"] is True and result["trace_requests"] == 200_000
    assert 0 < result["summary"]["requests"] < 200_000
    assert stdout.splitlines()[0].startswith(("PARTIAL", "WARNING"))
    assert "PARTIAL RESULT" in stdout
    rows = (out / "requests.csv").read_text().splitlines()
    assert len(rows) - 1 == result["summary"]["requests"]
    assert not list(out.glob(".*partial"))
    assert _marked(str(out)) == []


def _plan_args(trace: Path, out: Path) -> list[str | Path]:
    return [
        "plan", "--trace", trace, "--slo", "ttft_p99=1ms", "--gpu", "H100,H200",
        "--tp", "1,2", "--max-num-seqs-choices", "64,128",
        "--max-num-batched-tokens-choices", "2048", "--workers", "2", "--out", out,
        *LLAMA_8B,
    ]  # fmt: skip


def test_an_interrupted_plan_writes_a_partial_plan_and_leaves_no_worker(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    trace = mooncake(tmp_path / "long.jsonl", 20_000, gap_ms=20)
    process = _start(_plan_args(trace, out), tmp_path)
    _wait_for(lambda: len(_marked(str(out))) >= 3, "the workers")
    time.sleep(0.5)
    seconds, stdout, stderr = _stop(process, signal.SIGINT)
    assert seconds < STOP_BOUND, (seconds, stderr)
    assert process.returncode == 130, stderr
    said = [line for line in stderr.splitlines() if "interrupted" in line]
    assert len(said) == 1 and "partial plan" in said[0], stderr
    assert "Traceback" not in stderr
    report = json.loads((out / "plan.json").read_text())
    assert report["partial"] is True and len(report["unsearched"]) >= 1
    assert stdout.splitlines()[0].startswith("PARTIAL PLAN")
    assert _marked(str(out)) == []


def test_a_killed_plan_leaves_no_worker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    trace = mooncake(tmp_path / "long.jsonl", 20_000, gap_ms=20)
    process = _start(_plan_args(trace, out), tmp_path)
    _wait_for(lambda: len(_marked(str(out))) >= 3, "the workers")
    process.kill()
    process.communicate(timeout=30)
    _wait_for(lambda: _marked(str(out)) == [], "the workers to die", timeout=STOP_BOUND)


# --- bad input and bounded flags ---------------------------------------------------------


def test_a_length_of_ten_to_the_twelve_is_a_skipped_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    lines = mooncake(tmp_path / "t.jsonl", 4).read_text().splitlines()
    lines.insert(1, '{"timestamp": 50, "input_length": 1000000000000, "output_length": 4}')
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    run = run_cli(["replay", trace, "--out", out, "--quiet", "--no-plots", *SMALL_SERVER])
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert "skipped line 2: input_length" in run.stderr
    assert json.loads((out / "result.json").read_text())["summary"]["completed"] == 4


PLAN = ["plan", "--trace", "t.jsonl", "--slo", "ttft_p99=1s", "--gpu", "H100"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["replay", "t.jsonl", "--sample-interval", "1e-9"], "--sample-interval"),
        (["replay", "t.jsonl", "--sample-interval", "nan"], "--sample-interval"),
        (["replay", "t.jsonl", "--instances", "1000000"], "--instances"),
        (
            [*PLAN, "--max-replicas", "1000000"],
            "--max-replicas",
        ),
        (
            [*PLAN, "--max-num-seqs-choices", "1000000000"],
            "--max-num-seqs-choices",
        ),
    ],
)
def test_a_numeric_flag_out_of_bounds_is_one_line(
    tmp_path: Path, args: list[str], named: str
) -> None:
    mooncake(tmp_path / "t.jsonl", 4)
    started = time.monotonic()
    run = run_cli([*args, *SMALL_SERVER], cwd=tmp_path)
    assert named in one_line(run, args[0])
    assert time.monotonic() - started < 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


# --- defaults ----------------------------------------------------------------------------


def _burst(path: Path, count: int) -> Path:
    lines = [
        json.dumps({"timestamp": 0, "input_length": 16, "output_length": 2}) for _ in range(count)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


TIMED_SERVER = [*LLAMA_8B, "--timing-model", "roofline", "--max-num-seqs", "64"]


def test_a_replay_has_no_waiting_queue_cap_unless_set(tmp_path: Path) -> None:
    """1,500 requests at once on 64 sequences: vLLM queues them all (the server's default
    cap of 1,000 waiting refused 500 of them); the setting is reported."""
    trace = _burst(tmp_path / "burst.jsonl", 1500)
    out = tmp_path / "out"
    run = run_cli(["replay", trace, "--out", out, "--quiet", "--no-plots", *TIMED_SERVER])
    assert run.returncode == 0, run.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["summary"]["failed"] == 0
    assert result["settings"]["max_waiting_queue_length"] == 10_000_000
    assert not run.stdout.startswith("WARNING")


def test_refused_requests_lead_the_summary(tmp_path: Path) -> None:
    trace = _burst(tmp_path / "burst.jsonl", 400)
    out = tmp_path / "out"
    args: list[str | Path] = ["replay", trace, "--out", out, "--quiet", "--no-plots"]
    run = run_cli([*args, *TIMED_SERVER, "--max-waiting-queue-length", "100"])
    assert run.returncode == 0, run.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["settings"]["max_waiting_queue_length"] == 100
    refused = result["summary"]["failed"]
    assert refused == 300  # all arrive before a step: 100 wait, the rest are refused
    first = run.stdout.splitlines()[0]
    assert first.startswith(f"WARNING: {refused} of 400 requests did not complete")
    assert "refused" in first and "queue is full" in first
