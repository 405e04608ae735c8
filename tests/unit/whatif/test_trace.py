"""Reading request traces: Mooncake JSONL, CSV and OpenAI-request JSONL, told apart by the
file; arrivals in seconds from the first, in arrival order; a bad line is a problem
naming its 1-based line while the other lines load, or an error when strict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.recorded_run import RECORDED_TRACE
from vllm_sim.whatif.trace import TraceError, TraceRequest, read_trace


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    """`rows` one a line: a str as it is (a broken line), anything else as JSON."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def mooncake(
    timestamp: float, inputs: Any = 1024, outputs: Any = 8, **extra: Any
) -> dict[str, Any]:
    return {
        "timestamp": timestamp,
        "input_length": inputs,
        "output_length": outputs,
        "hash_ids": [1, 2],
        **extra,
    }


def arrivals(requests: Sequence[TraceRequest]) -> list[float]:
    return [r.arrival for r in requests]


# ---------------------------------------------------------------- Mooncake JSONL


def test_mooncake_lines_give_seconds_from_the_first_arrival_and_keep_hash_ids(
    tmp_path: Path,
) -> None:
    """Millisecond timestamps become seconds counted from the first request; lengths and
    block ids are kept as recorded."""
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [
            {"timestamp": 27000, "input_length": 1200, "output_length": 30, "hash_ids": [7, 8, 9]},
            {"timestamp": 27500, "input_length": 600, "output_length": 5, "hash_ids": [7, 10]},
            {"timestamp": 30250, "input_length": 100, "output_length": 1, "hash_ids": []},
        ],
    )
    trace = read_trace(path)
    assert trace.problems == []
    assert arrivals(trace.requests) == pytest.approx([0.0, 0.5, 3.25])
    first, second, third = trace.requests
    assert (first.input_length, first.output_length, first.hash_ids) == (1200, 30, (7, 8, 9))
    assert (second.input_length, second.output_length, second.hash_ids) == (600, 5, (7, 10))
    assert third.hash_ids == ()
    assert [r.line for r in trace.requests] == [1, 2, 3]
    assert all(r.body is None and r.endpoint is None for r in trace.requests)


def test_arrivals_are_sorted_with_ties_in_file_order(tmp_path: Path) -> None:
    """Requests come out in arrival order whatever the file's order; equal times keep the
    file's order, and each keeps its own line number."""
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [mooncake(3000, 11), mooncake(1000, 12), mooncake(2000, 13), mooncake(1000, 14)],
    )
    trace = read_trace(path)
    assert arrivals(trace.requests) == pytest.approx([0.0, 0.0, 1.0, 2.0])
    assert [r.line for r in trace.requests] == [2, 4, 3, 1]
    assert [r.input_length for r in trace.requests] == [12, 14, 13, 11]


def test_a_mooncake_line_without_timestamp_arrives_at_time_zero(tmp_path: Path) -> None:
    """A missing timestamp counts as 0 ms (the file's start)."""
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [{"input_length": 10, "output_length": 2}, mooncake(1500)],
    )
    trace = read_trace(path)
    assert arrivals(trace.requests) == pytest.approx([0.0, 1.5])
    assert trace.requests[0].hash_ids == ()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON"),
        ('["a", "list"]', "each line must be a JSON object"),
        (json.dumps({"timestamp": 1, "output_length": 2}), "input_length"),
        (json.dumps({"timestamp": 1, "input_length": 2}), "output_length"),
        (json.dumps(mooncake(-5)), "timestamp must be a non-negative number"),
        (json.dumps(mooncake(5, inputs=-3)), "input_length must be a positive integer"),
        (json.dumps(mooncake(5, inputs=0)), "input_length must be a positive integer"),
        (json.dumps(mooncake(5, outputs=2.5)), "output_length must be a positive integer"),
        (json.dumps(mooncake(5, inputs=True)), "input_length must be a positive integer"),
        (
            json.dumps(mooncake(5, hash_ids=[1, "2"])),
            "hash_ids must be a list of non-negative integers",
        ),
        (
            json.dumps(mooncake(5, hash_ids=[1.5])),
            "hash_ids must be a list of non-negative integers",
        ),
        (
            json.dumps(mooncake(5, hash_ids=[True])),
            "hash_ids must be a list of non-negative integers",
        ),
        (json.dumps(mooncake(5, hash_ids=7)), "hash_ids must be a list of non-negative integers"),
    ],
)
def test_a_bad_mooncake_line_is_reported_with_its_number_and_the_rest_loads(
    tmp_path: Path, line: str, reason: str
) -> None:
    """The bad third line is one problem, "line 3: <why>"; the lines around it load."""
    path = write_jsonl(tmp_path / "trace.jsonl", [mooncake(0), mooncake(100), line, mooncake(200)])
    trace = read_trace(path, fmt="mooncake")
    assert len(trace.problems) == 1
    assert trace.problems[0].startswith("line 3: ")
    assert reason in trace.problems[0]
    assert [r.line for r in trace.requests] == [1, 2, 4]


def test_blank_lines_are_skipped_but_still_counted(tmp_path: Path) -> None:
    """Line numbers are the file's own: blank lines are not requests but move the count."""
    path = tmp_path / "trace.jsonl"
    path.write_text(
        json.dumps(mooncake(0)) + "\n\n   \n" + "oops\n" + json.dumps(mooncake(10)) + "\n"
    )
    trace = read_trace(path)
    assert [r.line for r in trace.requests] == [1, 5]
    assert [p.split(":")[0] for p in trace.problems] == ["line 4"]


def test_problems_are_listed_in_file_order(tmp_path: Path) -> None:
    """Every bad line is listed once, in the order of the file."""
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [mooncake(0), "x", mooncake(5, inputs=0), mooncake(9), "{", mooncake(12)],
    )
    trace = read_trace(path)
    assert [p.split(":")[0] for p in trace.problems] == ["line 2", "line 3", "line 5"]
    assert [r.line for r in trace.requests] == [1, 4, 6]


def test_strict_reading_stops_at_the_first_bad_line(tmp_path: Path) -> None:
    """With strict, the first bad line raises TraceError naming the file and that line."""
    path = write_jsonl(tmp_path / "trace.jsonl", [mooncake(0), mooncake(1), "nope", "again"])
    with pytest.raises(TraceError) as raised:
        read_trace(path, strict=True)
    message = str(raised.value)
    assert str(path) in message
    assert "line 3: not JSON" in message
    assert "line 4" not in message


def test_a_trace_with_no_readable_line_is_an_error(tmp_path: Path) -> None:
    """No usable request at all raises TraceError, quoting the first problem."""
    path = write_jsonl(tmp_path / "trace.jsonl", ["garbage", mooncake(1, inputs=0)])
    with pytest.raises(TraceError, match=r"no request could be read.*line 1: not JSON"):
        read_trace(path)


def test_an_empty_or_missing_file_is_an_error(tmp_path: Path) -> None:
    """An empty file has no request; a missing one is named as missing."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TraceError, match="no request could be read"):
        read_trace(empty)
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "absent.jsonl")


def test_limit_keeps_the_first_requests_of_the_file(tmp_path: Path) -> None:
    """`limit` N reads the first N usable requests and stops there: bad lines before them
    are still reported, lines after them are not read."""
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [mooncake(400, 1), "bad", mooncake(100, 2), mooncake(300, 3), "bad too", mooncake(0, 4)],
    )
    trace = read_trace(path, limit=2)
    assert sorted(r.input_length for r in trace.requests) == [1, 2]
    assert arrivals(trace.requests) == pytest.approx([0.0, 0.3])
    assert [p.split(":")[0] for p in trace.problems] == ["line 2"]
    assert len(read_trace(path, limit=100).requests) == 4


# ---------------------------------------------------------------- CSV


def test_the_bundled_csv_loads_all_300_requests_from_arrival_s() -> None:
    """The recorded vLLM run: 300 requests whose arrivals are its `arrival_s` column and
    whose lengths are its token columns."""
    trace = read_trace(RECORDED_TRACE)
    assert trace.problems == []
    assert len(trace.requests) == 300
    first, second = trace.requests[:2]
    assert (first.line, first.arrival, first.input_length, first.output_length) == (
        2,
        0.0,
        2358,
        531,
    )
    assert second.line == 3
    assert second.arrival == pytest.approx(0.285059)
    assert (second.input_length, second.output_length) == (1034, 769)
    assert arrivals(trace.requests) == sorted(arrivals(trace.requests))
    assert all(r.hash_ids == () and r.body is None for r in trace.requests)


def test_a_csv_with_millisecond_timestamps(tmp_path: Path) -> None:
    """A `timestamp` column is in milliseconds; `input_length`/`output_length` are token
    counts; the header is line 1."""
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,input_length,output_length\n5000,100,10\n5250,200,20\n7000,300,30\n")
    trace = read_trace(path)
    assert arrivals(trace.requests) == pytest.approx([0.0, 0.25, 2.0])
    assert [r.input_length for r in trace.requests] == [100, 200, 300]
    assert [r.output_length for r in trace.requests] == [10, 20, 30]
    assert [r.line for r in trace.requests] == [2, 3, 4]


def test_a_tab_separated_file_with_other_column_names(tmp_path: Path) -> None:
    """A .tsv file is read with tabs; `arrival`, `prompt_tokens` and `completion_tokens`
    are accepted names."""
    path = tmp_path / "trace.tsv"
    path.write_text("arrival\tprompt_tokens\tcompletion_tokens\n1.5\t40\t4\n2.0\t50\t5\n")
    trace = read_trace(path)
    assert arrivals(trace.requests) == pytest.approx([0.0, 0.5])
    assert [(r.input_length, r.output_length) for r in trace.requests] == [(40, 4), (50, 5)]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("abc,10,2", "arrival 'abc' is not a number"),
        ("-1,10,2", "arrival must be a non-negative number"),
        ("1,zero,2", "input tokens 'zero' is not a number"),
        ("1,10,0", "output tokens must be at least 1"),
        ("1,10,", "no token columns"),
        (",10,2", "no arrival column"),
    ],
)
def test_a_bad_csv_row_is_reported_with_its_file_line(
    tmp_path: Path, row: str, reason: str
) -> None:
    """Row 3 of the data is line 4 of the file (the header is line 1)."""
    path = tmp_path / "trace.csv"
    path.write_text(f"arrival_s,input_tokens,output_tokens\n0,10,2\n0.5,10,2\n{row}\n2,10,2\n")
    trace = read_trace(path)
    assert len(trace.problems) == 1
    assert trace.problems[0].startswith("line 4: ")
    assert reason in trace.problems[0]
    assert [r.line for r in trace.requests] == [2, 3, 5]


# ---------------------------------------------------------------- OpenAI requests


def test_openai_requests_bare_or_wrapped_with_their_endpoint_and_limits(tmp_path: Path) -> None:
    """A chat body (messages) or completion body (prompt), bare or under `body` or
    `request`; a chat's max_completion_tokens wins over its max_tokens, a completion reads
    max_tokens alone (as its endpoint does); no limit leaves the length to the model; the
    prompt length is estimated from its words."""
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "one two three"},
        ],
        "max_tokens": 7,
    }
    chat["max_completion_tokens"] = 4
    completion = {"model": "m", "prompt": "a b c d", "max_tokens": 9, "max_completion_tokens": 4}
    unbounded = {"model": "m", "prompt": "hello"}
    path = write_jsonl(
        tmp_path / "requests.jsonl",
        [
            {**chat, "timestamp": 1000},
            {"body": completion, "timestamp": 1500},
            {"request": unbounded, "timestamp": 4000},
        ],
    )
    trace = read_trace(path)
    assert trace.problems == []
    first, second, third = trace.requests
    assert arrivals(trace.requests) == pytest.approx([0.0, 0.5, 3.0])
    assert (first.endpoint, first.output_length, first.input_length) == ("chat", 4, 5)
    assert first.body is not None and first.body["messages"] == chat["messages"]
    assert (second.endpoint, second.output_length, second.input_length) == ("completion", 9, 4)
    assert second.body == completion
    assert (third.endpoint, third.output_length, third.input_length) == ("completion", None, 1)
    assert third.body == unbounded


def test_openai_requests_without_times_arrive_rate_a_second(tmp_path: Path) -> None:
    """Without timestamps, requests follow one another 1/rate seconds apart in file order;
    without a rate, all arrive at once."""
    body = {"model": "m", "prompt": "x", "max_tokens": 2}
    path = write_jsonl(tmp_path / "requests.jsonl", [body, body, body, body])
    assert arrivals(read_trace(path, rate=4.0).requests) == pytest.approx([0.0, 0.25, 0.5, 0.75])
    assert arrivals(read_trace(path).requests) == [0.0, 0.0, 0.0, 0.0]


def test_an_untimed_request_follows_the_one_before_it(tmp_path: Path) -> None:
    """A request without a timestamp among timed ones comes 1/rate after the request on
    the line before it."""
    body = {"model": "m", "prompt": "x", "max_tokens": 2}
    path = write_jsonl(
        tmp_path / "requests.jsonl",
        [{"body": body, "timestamp": 2000}, body, {"body": body, "timestamp": 5000}],
    )
    trace = read_trace(path, rate=2.0)
    assert arrivals(trace.requests) == pytest.approx([0.0, 0.5, 3.0])
    assert [r.line for r in trace.requests] == [1, 2, 3]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ({"model": "m"}, "neither messages (chat) nor prompt (completion)"),
        ({"body": "text"}, "the request body must be a JSON object"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"prompt": "x", "max_tokens": "5"}, "max_tokens must be a positive integer"),
        ({"messages": [], "max_completion_tokens": True}, "max_tokens must be a positive integer"),
        ({"prompt": "x", "timestamp": -1}, "timestamp must be a non-negative number"),
        ({"prompt": "x", "timestamp": "soon"}, "timestamp must be a non-negative number"),
    ],
)
def test_a_bad_openai_line_is_reported_with_its_number(
    tmp_path: Path, line: dict[str, Any], reason: str
) -> None:
    """The bad second line is "line 2: <why>"; the others load."""
    good = {"model": "m", "prompt": "x", "max_tokens": 2}
    path = write_jsonl(tmp_path / "requests.jsonl", [good, line, good])
    trace = read_trace(path, fmt="openai")
    assert len(trace.problems) == 1
    assert trace.problems[0].startswith("line 2: ")
    assert reason in trace.problems[0]
    assert [r.line for r in trace.requests] == [1, 3]


# ---------------------------------------------------------------- format detection


def test_the_format_is_told_from_the_file(tmp_path: Path) -> None:
    """A .csv file is CSV; JSONL with hash_ids or input_length is Mooncake; other JSONL
    is OpenAI requests. The first readable line decides, a broken first line does not."""
    csv_file = tmp_path / "trace.CSV"
    csv_file.write_text("arrival_s,input_tokens,output_tokens\n0,5,5\n")
    assert read_trace(csv_file).requests[0].input_length == 5

    with_hashes = write_jsonl(tmp_path / "a.jsonl", ["{broken", mooncake(0)])
    loaded = read_trace(with_hashes)
    assert loaded.requests[0].hash_ids == (1, 2)
    assert loaded.requests[0].body is None

    lengths_only = write_jsonl(
        tmp_path / "b.jsonl", [{"timestamp": 0, "input_length": 3, "output_length": 4}]
    )
    assert read_trace(lengths_only).requests[0].input_length == 3

    openai = write_jsonl(tmp_path / "c.jsonl", [{"prompt": "p q", "max_tokens": 3}])
    request = read_trace(openai).requests[0]
    assert (request.endpoint, request.input_length, request.output_length) == ("completion", 2, 3)


def test_an_explicit_format_overrides_detection(tmp_path: Path) -> None:
    """Read as OpenAI requests, a Mooncake line has neither messages nor prompt."""
    path = write_jsonl(tmp_path / "trace.jsonl", [mooncake(0)])
    assert len(read_trace(path, fmt="mooncake").requests) == 1
    with pytest.raises(TraceError, match="line 1: neither messages"):
        read_trace(path, fmt="openai")
