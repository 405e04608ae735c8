"""Every number of a trace is range-checked (see trace.py's docstring): NaN, Infinity,
1e308, a length of 10^12, an epoch-millisecond time among relative ones, each make their
line a named, skipped problem (a refusal with --strict), never a run without end or a
traceback; and a trace is read in compact columns, not line by line kept as objects."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vllm_sim.whatif import trace as trace_module
from vllm_sim.whatif.trace import MAX_TOKENS, TraceError, read_trace


def mooncake(timestamp: object, inputs: object = 64, hash_ids: object = None) -> str:
    line: dict[str, object] = {"timestamp": timestamp, "input_length": inputs, "output_length": 4}
    if hash_ids is not None:
        line["hash_ids"] = hash_ids
    return json.dumps(line)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


BAD_TIMES = ["NaN", "Infinity", "-Infinity", "1e308", "-1"]


@pytest.mark.parametrize("value", BAD_TIMES)
def test_a_timestamp_that_is_no_time_is_a_bad_line(tmp_path: Path, value: str) -> None:
    good = [mooncake(0), mooncake(100)]
    bad = f'{{"timestamp": {value}, "input_length": 64, "output_length": 4}}'
    path = write(tmp_path / "t.jsonl", [good[0], bad, good[1]])
    trace = read_trace(path)
    assert [r.line for r in trace.requests] == [1, 3]
    assert len(trace.problems) == 1 and trace.problems[0].startswith("line 2: timestamp")
    with pytest.raises(TraceError, match="line 2: timestamp"):
        read_trace(path, strict=True)


def test_one_epoch_millisecond_time_among_relative_ones_is_a_bad_line(tmp_path: Path) -> None:
    lines = [mooncake(100 * i) for i in range(5)]
    lines.insert(2, mooncake(1_733_600_000_000))  # 2024 in epoch milliseconds
    path = write(tmp_path / "t.jsonl", lines)
    trace = read_trace(path)
    assert [r.line for r in trace.requests] == [1, 2, 4, 5, 6]
    assert trace.requests[-1].arrival == pytest.approx(0.4)
    assert len(trace.problems) == 1 and trace.problems[0].startswith("line 3: time")
    with pytest.raises(TraceError, match="line 3: time"):
        read_trace(path, strict=True)


def test_epoch_times_throughout_are_one_unit(tmp_path: Path) -> None:
    lines = [mooncake(1_733_600_000_000 + 250 * i) for i in range(3)]
    trace = read_trace(write(tmp_path / "t.jsonl", lines))
    assert [r.arrival for r in trace.requests] == pytest.approx([0.0, 0.25, 0.5])
    assert trace.problems == []


@pytest.mark.parametrize("inputs", [10**12, MAX_TOKENS + 1, 10**400])
def test_a_length_past_the_cap_names_its_line(tmp_path: Path, inputs: int) -> None:
    lines = [mooncake(0), f'{{"timestamp": 5, "input_length": {inputs}, "output_length": 4}}']
    path = write(tmp_path / "t.jsonl", [*lines, mooncake(10)])
    trace = read_trace(path)
    assert [r.line for r in trace.requests] == [1, 3]
    assert trace.problems[0].startswith("line 2: ")
    with pytest.raises(TraceError, match="line 2: "):
        read_trace(path, strict=True)


def test_too_many_or_too_large_block_ids_are_a_bad_line(tmp_path: Path) -> None:
    lines = [mooncake(0, hash_ids=[2**63]), mooncake(1, hash_ids=list(range(30_000))), mooncake(2)]
    trace = read_trace(write(tmp_path / "t.jsonl", lines))
    assert [r.line for r in trace.requests] == [3]
    assert [p[:7] for p in trace.problems] == ["line 1:", "line 2:"]


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ("nan,64,4", "arrival"),
        ("inf,64,4", "arrival"),
        ("1e308,64,4", "arrival"),
        ("0.5,nan,4", "input tokens"),
        ("0.5,1e308,4", "input tokens"),
        ("0.5,1000000000000,4", "input tokens"),
        ("0.5,64,inf", "output tokens"),
        ("0.5,2.5,4", "input tokens"),
    ],
)
def test_a_csv_number_out_of_range_is_a_bad_line(tmp_path: Path, row: str, named: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,input_tokens,output_tokens\n0,64,4\n{row}\n1,64,4\n")
    trace = read_trace(path)
    assert [r.line for r in trace.requests] == [2, 4]
    assert trace.problems[0].startswith("line 3: ") and named in trace.problems[0]


def test_openai_max_tokens_past_the_cap_is_a_bad_line(tmp_path: Path) -> None:
    body = {"model": "m", "prompt": "hi", "max_tokens": MAX_TOKENS + 1}
    path = write(tmp_path / "t.jsonl", [json.dumps({"prompt": "a"}), json.dumps(body)])
    trace = read_trace(path, fmt="openai")
    assert [r.line for r in trace.requests] == [1]
    assert trace.problems[0].startswith("line 2: max_tokens")


def test_a_large_trace_is_held_in_compact_columns(tmp_path: Path) -> None:
    """200,000 Mooncake lines of four block ids each: the reading process's peak memory
    grows by less than 150 bytes a request (about 60 in columns; objects per line took
    over 500), and the
    requests read back as written."""
    rng = random.Random(0)
    count = 200_000
    path = tmp_path / "big.jsonl"
    with path.open("w") as handle:
        for i in range(count):
            ids = [rng.randrange(10**9) for _ in range(4)]
            handle.write(mooncake(10 * i, 2048, ids) + "\n")
    probe = textwrap.dedent(
        f"""
        from pathlib import Path
        from vllm_sim.whatif.trace import read_trace

        def peak():  # KiB; this process's own (ru_maxrss keeps the parent's across exec)
            status = Path("/proc/self/status").read_text()
            return int(status.split("VmHWM:")[1].split()[0])

        before = peak()
        trace = read_trace(Path({str(path)!r}))
        after = peak()
        last = trace.requests[-1]
        print(len(trace.requests), (after - before) * 1024 / len(trace.requests))
        print(last.line, last.arrival, last.input_length, len(last.hash_ids))
        """
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.splitlines()
    read, per_request = first.split()
    assert int(read) == count
    assert float(per_request) < 150, run.stdout
    assert second.split() == [str(count), f"{10 * (count - 1) / 1000.0}", "2048", "4"]


def test_a_line_past_the_length_cap_is_a_bad_line_never_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_module, "MAX_LINE_CHARS", 100)
    long = json.dumps({"timestamp": 5, "input_length": 64, "output_length": 4, "x": "y" * 500})
    path = write(tmp_path / "t.jsonl", [mooncake(0), long, mooncake(10)])
    trace = read_trace(path, fmt="mooncake")
    assert [r.line for r in trace.requests] == [1, 3]
    assert trace.problems == ["line 2: longer than 100 characters"]


def test_json_nested_past_the_recursion_limit_is_a_bad_line(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [mooncake(0), "[" * 100_000, mooncake(10)])
    trace = read_trace(path, fmt="mooncake")
    assert [r.line for r in trace.requests] == [1, 3]
    assert trace.problems[0].startswith("line 2: not JSON")


def test_a_csv_field_past_csvs_limit_is_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    huge = "9" * 200_000
    path.write_text(f"arrival_s,input_tokens,output_tokens\n0,64,4\n0.5,{huge},4\n1,64,4\n")
    trace = read_trace(path)
    assert [r.line for r in trace.requests] == [2, 4]
    assert trace.problems[0].startswith("line 3: not CSV")
