"""`vllm-sim replay` and `vllm-sim compare` run as a user runs them, in a subprocess: a
replay writes its result, CSVs, HTML report and pictures into its output folder and
nowhere else; a bad trace line is reported and skipped (or, with --strict, stops the run
with one line and status 2); a bad server flag or a missing trace stops it with one line
and status 2; an OpenAI-request trace replays at --rate; compare prints the two runs'
table, or one line and status 2 for a missing run."""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.recorded_run import RECORDED_RUN_FLAGS, RECORDED_TRACE
from tests.support.server import run_cli
from vllm_sim import __version__ as vllm_sim_version

SMALL_SERVER = ["--model", "test-model", "--max-model-len", "2048"]
PLOTS = {"load.png", "kv_usage.png", "latency_cdf.png"}
RUN_FILES = {"result.json", "requests.csv", "samples.csv", "report.html"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


Finished = subprocess.CompletedProcess[str]


def vllm_sim(cwd: Path, *args: str | Path) -> Finished:
    """`python -m vllm_sim ARGS` in `cwd`, its status and output."""
    return run_cli(args, cwd=cwd, timeout=60)


def mooncake_trace(path: Path, bad_line: int | None = None, count: int = 6) -> Path:
    """`count` small Mooncake requests 100 ms apart; line `bad_line` (1-based) is not JSON."""
    lines = [
        json.dumps({"timestamp": 100 * i, "input_length": 64, "output_length": 4, "hash_ids": [i]})
        for i in range(count)
    ]
    if bad_line is not None:
        lines.insert(bad_line - 1, "{this is not json")
    path.write_text("\n".join(lines) + "\n")
    return path


def tree(folder: Path) -> set[str]:
    """Every path under `folder`, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """An empty working folder to run in, and a separate one for the inputs."""
    work, inputs = tmp_path / "work", tmp_path / "inputs"
    work.mkdir()
    inputs.mkdir()
    return work, inputs


def test_a_replay_writes_its_report_into_the_output_folder_only(
    dirs: tuple[Path, Path],
) -> None:
    """The recorded trace's first 80 requests over 2 instances: exit 0, a summary on
    stdout, and the output folder holding result.json, requests.csv, samples.csv,
    report.html and the three PNG pictures, which the report inlines; the working folder
    gains that folder and nothing else, and the inputs' folder is untouched."""
    work, inputs = dirs
    trace = inputs / "recorded.csv"
    trace.write_bytes(RECORDED_TRACE.read_bytes())
    run = vllm_sim(
        work,
        "replay",
        trace,
        "--quiet",
        "--limit",
        "80",
        "--instances",
        "2",
        "--router",
        "least-requests",
        "--out",
        "runs/first",
        *RECORDED_RUN_FLAGS,
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "skipped" not in run.stderr
    assert "80 requests: 80 completed, 0 failed" in run.stdout
    assert f"report: {Path('runs/first/report.html')}" in run.stdout

    out = work / "runs" / "first"
    assert tree(work) == {
        "runs",
        "runs/first",
        *(f"runs/first/{name}" for name in RUN_FILES | PLOTS),
    }
    assert tree(inputs) == {"recorded.csv"}
    for picture in PLOTS:
        assert (out / picture).read_bytes().startswith(PNG_SIGNATURE)
    page = (out / "report.html").read_text()
    inlined = base64.b64encode((out / "load.png").read_bytes()).decode()
    assert inlined in page
    assert page.count("data:image/png;base64,") == 3

    result = json.loads((out / "result.json").read_text())
    assert result["kind"] == "replay"
    # What it was made from, named in the result and at the top of the page.
    origin = result["origin"]
    assert origin["trace"] == str(trace)
    assert origin["trace_sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert origin["command"].startswith(f"vllm-sim replay {trace} --quiet --limit 80")
    assert origin["version"] == vllm_sim_version
    assert origin["trace_sha256"] in page and html.escape(origin["command"]) in page
    assert result["settings"]["instances"] == 2
    assert result["settings"]["router"] == "least-requests"
    assert result["settings"]["max_num_seqs"] == 128
    assert result["summary"]["completed"] == 80
    assert result["problems"] == []
    requests = (out / "requests.csv").read_text().splitlines()
    assert len(requests) == 81
    assert {line.split(",")[2] for line in requests[1:]} == {"0", "1"}


def test_without_out_the_report_goes_to_replay_out_in_the_working_folder(
    dirs: tuple[Path, Path],
) -> None:
    """With --no-plots and no --out: ./replay-out holds the four files and no picture,
    and the report inlines none."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl")
    run = vllm_sim(work, "replay", trace, "--quiet", "--no-plots", *SMALL_SERVER)
    assert run.returncode == 0, run.stderr
    assert tree(work) == {"replay-out", *(f"replay-out/{name}" for name in RUN_FILES)}
    assert "<img" not in (work / "replay-out" / "report.html").read_text()


def test_no_plots_does_not_tell_to_install_matplotlib(dirs: tuple[Path, Path]) -> None:
    """Pictures left out on request are not blamed on a missing matplotlib (which the
    development environment has)."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl")
    run = vllm_sim(work, "replay", trace, "--quiet", "--no-plots", "--out", "out", *SMALL_SERVER)
    assert run.returncode == 0, run.stderr
    assert "pip install" not in (work / "out" / "report.html").read_text()


def test_a_bad_trace_line_is_reported_and_skipped(dirs: tuple[Path, Path]) -> None:
    """Line 3 is not JSON: stderr says so by its number, the other 6 requests replay,
    exit 0, and result.json lists the skipped line."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl", bad_line=3)
    run = vllm_sim(work, "replay", trace, "--quiet", "--no-plots", "--out", "out", *SMALL_SERVER)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("vllm-sim replay: skipped line 3: not JSON")
    assert "6 requests: 6 completed, 0 failed" in run.stdout
    result = json.loads((work / "out" / "result.json").read_text())
    assert len(result["problems"]) == 1
    assert result["problems"][0].startswith("line 3: not JSON")
    assert "line 3: not JSON" in (work / "out" / "report.html").read_text()


def test_strict_stops_at_the_bad_line_with_one_line_and_status_2(
    dirs: tuple[Path, Path],
) -> None:
    """With --strict the same trace exits 2 with one stderr line naming line 3, and no
    output folder is made."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl", bad_line=3)
    run = vllm_sim(work, "replay", trace, "--quiet", "--strict", "--out", "out", *SMALL_SERVER)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("vllm-sim replay: ")
    assert "line 3" in lines[0]
    assert run.stdout == ""
    assert tree(work) == set()


def test_a_bad_server_flag_value_exits_2_with_one_line(dirs: tuple[Path, Path]) -> None:
    """`--max-num-seqs abc` is a server flag replay cannot read: status 2, one line that
    names the flag, nothing written."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl")
    run = vllm_sim(work, "replay", trace, "--quiet", "--out", "out", "--max-num-seqs", "abc")
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("vllm-sim replay: ")
    assert "--max-num-seqs" in lines[0] and "abc" in lines[0]
    assert tree(work) == set()


def test_a_replay_takes_the_speculative_config(dirs: tuple[Path, Path]) -> None:
    """`--speculative-config` is a server flag like any: the replay decodes speculatively
    and its result names it; a bad one stops it with one line and status 2."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl")
    spec = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
    args: tuple[str | Path, ...] = (
        "replay",
        trace,
        "--quiet",
        "--no-plots",
        *SMALL_SERVER,
        "--speculative-config",
    )
    run = vllm_sim(work, *args, spec, "--out", "out")
    assert run.returncode == 0, run.stderr
    result = json.loads((work / "out" / "result.json").read_text())
    assert result["settings"]["speculative_config"] == json.loads(spec)
    assert result["summary"]["completed"] == 6
    bad = vllm_sim(work, *args, '{"method":"ngram"}', "--out", "bad")
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "vllm-sim replay: invalid speculative-config: num_speculative_tokens is required with "
        "method ngram"
    ]


def test_a_missing_trace_exits_2_with_one_line(dirs: tuple[Path, Path]) -> None:
    """A trace path that does not exist: status 2, one line naming it."""
    work, inputs = dirs
    run = vllm_sim(work, "replay", inputs / "absent.jsonl", "--quiet", *SMALL_SERVER)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "absent.jsonl" in lines[0]
    assert tree(work) == set()


def test_an_output_path_that_is_a_file_exits_2_with_one_line(dirs: tuple[Path, Path]) -> None:
    """--out naming an existing file cannot become the output folder: status 2 and one
    line, as for the other errors a replay reports."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl")
    (work / "taken").write_text("mine\n")
    run = vllm_sim(work, "replay", trace, "--quiet", "--no-plots", "--out", "taken", *SMALL_SERVER)
    assert run.returncode == 2
    assert len(run.stderr.splitlines()) == 1
    assert (work / "taken").read_text() == "mine\n"


def test_compare_prints_the_table_of_two_runs(dirs: tuple[Path, Path]) -> None:
    """Two replays of one trace, over 1 and 2 instances: compare A B exits 0 and prints a
    header with B/A and one row per mean, each with a ratio; a missing run exits 2 with
    one line naming it."""
    work, inputs = dirs
    trace = mooncake_trace(inputs / "trace.jsonl", count=20)
    for name, instances in (("a", "1"), ("b", "2")):
        run = vllm_sim(
            work,
            "replay",
            trace,
            "--quiet",
            "--no-plots",
            "--instances",
            instances,
            "--out",
            name,
            *RECORDED_RUN_FLAGS,
        )
        assert run.returncode == 0, run.stderr

    shown = vllm_sim(work, "compare", "a", "b/result.json")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    table = lines[: lines.index("")]
    assert table[0].split() == ["metric", "unit", "A:", "a", "B:", "b/result.json", "B/A"]
    means = json.loads((work / "a" / "result.json").read_text())["means"]
    assert [line.split()[0] for line in table[1:]] == list(means)
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    unit, *values = rows["ttft_mean"]
    a_ttft, b_ttft, ratio = (float(v) for v in values)
    assert unit == "ms" and ratio == pytest.approx(b_ttft / a_ttft, rel=1e-3)
    assert rows["request_throughput"][3] == "1"
    assert "instances: 1 -> 2" in lines[lines.index("") + 2]

    missing = vllm_sim(work, "compare", "a", "nowhere")
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert len(missing.stderr.splitlines()) == 1
    assert "nowhere" in missing.stderr


def test_many_bad_lines_are_reported_twenty_then_counted(dirs: tuple[Path, Path]) -> None:
    """25 bad lines: the first 20 are named on stderr, the other 5 counted in one line;
    result.json lists all 25."""
    work, inputs = dirs
    trace = inputs / "trace.jsonl"
    good = json.dumps({"timestamp": 0, "input_length": 8, "output_length": 2})
    trace.write_text(good + "\n" + "broken\n" * 25)
    run = vllm_sim(work, "replay", trace, "--quiet", "--no-plots", "--out", "out", *SMALL_SERVER)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 21
    for number, line in zip(range(2, 22), lines[:20], strict=True):
        assert line.startswith(f"vllm-sim replay: skipped line {number}: not JSON")
    assert lines[20:] == ["vllm-sim replay: skipped 5 more lines"]
    result = json.loads((work / "out" / "result.json").read_text())
    assert len(result["problems"]) == 25


def test_an_openai_request_trace_replays_at_the_given_rate(dirs: tuple[Path, Path]) -> None:
    """Chat and completion bodies without times, --rate 2: they arrive half a second
    apart, are planned by their endpoints and complete with their own max tokens."""
    work, inputs = dirs
    trace = inputs / "requests.jsonl"
    bodies = [
        {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        {"body": {"model": "test-model", "prompt": "a b c", "max_tokens": 5, "ignore_eos": True}},
        {"request": {"model": "test-model", "prompt": "d e", "max_tokens": 2, "ignore_eos": True}},
    ]
    trace.write_text("".join(json.dumps(body) + "\n" for body in bodies))
    run = vllm_sim(
        work, "replay", trace, "--quiet", "--no-plots", "--rate", "2", "--out", "out", *SMALL_SERVER
    )
    assert run.returncode == 0, run.stderr
    assert "3 requests: 3 completed, 0 failed" in run.stdout
    with (work / "out" / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(row["arrival"]) for row in rows] == [0.0, 0.5, 1.0]
    assert [row["output_tokens"] for row in rows][1:] == ["5", "2"]
    assert 1 <= int(rows[0]["output_tokens"]) <= 3
