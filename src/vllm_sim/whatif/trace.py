"""Request traces: what arrives when, how long its prompt is and how much it generates.

Three formats, told apart by the file (or `--format`):
- Mooncake JSONL: `timestamp` (milliseconds), `input_length`, `output_length` and
  `hash_ids`, the ids of the prompt's 512-token blocks (the same id, the same block).
- CSV with a header: the arrival in seconds (`arrival_s` or `arrival`, or `timestamp` in
  milliseconds), the prompt's tokens (`input_tokens`, `input_length` or `prompt_tokens`)
  and the output's (`output_tokens`, `output_length` or `completion_tokens`).
- OpenAI-request JSONL, as load tools record them: each line a chat or completion request
  body, bare or under `body` (or `request`), with its send time in `timestamp`
  (milliseconds) beside it; without times, requests arrive `--rate` a second.

A line that cannot be read is a problem with its line number; the rest of the trace still
runs unless the reader is strict.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

TraceFormat = Literal["auto", "mooncake", "csv", "openai"]
TRACE_FORMATS: tuple[TraceFormat, ...] = ("auto", "mooncake", "csv", "openai")
Endpoint = Literal["chat", "completion"]

# Mooncake's traces hash prompts in blocks of this many tokens.
MOONCAKE_BLOCK = 512

_ARRIVAL_S = ("arrival_s", "arrival", "arrival_time")
_ARRIVAL_MS = ("timestamp", "timestamp_ms")
_INPUT = ("input_tokens", "input_length", "prompt_tokens")
_OUTPUT = ("output_tokens", "output_length", "completion_tokens")


class TraceError(ValueError):
    """The trace cannot run at all (no file, no usable line, or a bad line when strict)."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    line: int  # in the file, 1-based (the header is line 1 of a CSV)
    arrival: float  # seconds from the trace's first arrival
    input_length: int  # prompt tokens (for an OpenAI request: an estimate before tokenizing)
    output_length: int | None  # None: the model decides (a request without max tokens)
    hash_ids: tuple[int, ...] = ()
    body: dict[str, Any] | None = None  # an OpenAI request's body
    endpoint: Endpoint | None = None


@dataclass(slots=True)
class Trace:
    requests: list[TraceRequest]
    problems: list[str] = field(default_factory=list)  # "line N: why", in file order


class _BadLine(ValueError):
    pass


def read_trace(
    path: Path,
    fmt: TraceFormat = "auto",
    strict: bool = False,
    rate: float | None = None,
    limit: int | None = None,
) -> Trace:
    """The trace in `path`, arrivals made relative to the first, in arrival order."""
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    kind = _format_of(path) if fmt == "auto" else fmt
    problems: list[str] = []
    requests: list[TraceRequest] = []
    lines = _csv_rows(path) if kind == "csv" else _json_rows(path)
    parse = _PARSERS[kind]
    for number, row in lines:
        try:
            requests.append(parse(number, row))
        except _BadLine as error:
            problem = f"line {number}: {error}"
            if strict:
                raise TraceError(f"{path}: {problem}") from None
            problems.append(problem)
        if limit is not None and len(requests) >= limit:
            break
    if not requests:
        why = f" ({problems[0]})" if problems else ""
        raise TraceError(f"{path}: no request could be read{why}")
    return Trace(_timed(requests, rate), problems)


def _format_of(path: Path) -> TraceFormat:
    if path.suffix.lower() in (".csv", ".tsv"):
        return "csv"
    for _, row in _json_rows(path):
        if isinstance(row, dict):
            if "hash_ids" in row or "input_length" in row:
                return "mooncake"
            return "openai"
    return "openai"


def _json_rows(path: Path) -> Iterator[tuple[int, object]]:
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                yield number, json.loads(text)
            except ValueError as error:
                yield number, _BadLine(f"not JSON ({error})")


def _csv_rows(path: Path) -> Iterator[tuple[int, object]]:
    with path.open(newline="", encoding="utf-8", errors="replace") as handle:
        sample = handle.read(4096)
        handle.seek(0)
        delimiter = "\t" if "\t" in sample.split("\n", 1)[0] else ","
        reader = csv.DictReader(handle, delimiter=delimiter)
        for row in reader:
            yield reader.line_num, row


def _mooncake(number: int, row: object) -> TraceRequest:
    data = _object(row)
    hash_ids = data.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hash_ids
    ):
        raise _BadLine("hash_ids must be a list of non-negative integers")
    return TraceRequest(
        number,
        _number(data, "timestamp", 0.0) / 1000.0,
        _count(data, "input_length"),
        _count(data, "output_length"),
        tuple(hash_ids),
    )


def _csv(number: int, row: object) -> TraceRequest:
    data = _object(row)
    arrival = _first(data, _ARRIVAL_S)
    scale = 1.0
    if arrival is None:
        arrival, scale = _first(data, _ARRIVAL_MS), 0.001
    if arrival is None:
        raise _BadLine(f"no arrival column (one of {', '.join(_ARRIVAL_S + _ARRIVAL_MS)})")
    inputs, outputs = _first(data, _INPUT), _first(data, _OUTPUT)
    if inputs is None or outputs is None:
        raise _BadLine(
            f"no token columns (one of {', '.join(_INPUT)}; one of {', '.join(_OUTPUT)})"
        )
    return TraceRequest(
        number,
        _float(arrival, "arrival") * scale,
        _int(inputs, "input tokens"),
        _int(outputs, "output tokens"),
    )


def _openai(number: int, row: object) -> TraceRequest:
    data = _object(row)
    body = data.get("body", data.get("request", data))
    if not isinstance(body, dict):
        raise _BadLine("the request body must be a JSON object")
    if isinstance(body.get("messages"), list):
        endpoint: Endpoint = "chat"
        words = sum(
            len(str(m.get("content", "")).split()) for m in body["messages"] if isinstance(m, dict)
        )
    elif "prompt" in body:
        endpoint = "completion"
        words = len(str(body["prompt"]).split())
    else:
        raise _BadLine("neither messages (chat) nor prompt (completion)")
    # What the endpoint itself reads: completions know max_tokens only.
    output = body.get("max_tokens")
    if endpoint == "chat":
        output = body.get("max_completion_tokens", output)
    if output is not None and (
        not isinstance(output, int) or isinstance(output, bool) or output < 1
    ):
        raise _BadLine("max_tokens must be a positive integer")
    timestamp = data.get("timestamp")
    arrival = -1.0 if timestamp is None else _number(data, "timestamp", 0.0) / 1000.0
    return TraceRequest(number, arrival, max(words, 1), output, (), body, endpoint)


_PARSERS = {"mooncake": _mooncake, "csv": _csv, "openai": _openai}


def _timed(requests: list[TraceRequest], rate: float | None) -> list[TraceRequest]:
    """Arrivals from the first one; requests with no time of their own follow the one
    before, 1/rate seconds later (at once without a rate)."""
    gap = 1.0 / rate if rate else 0.0
    timed: list[TraceRequest] = []
    previous = None
    for request in requests:
        arrival = request.arrival
        if arrival < 0:
            arrival = 0.0 if previous is None else previous + gap
        previous = arrival
        timed.append(_at(request, arrival))
    timed.sort(key=lambda r: r.arrival)  # stable: ties keep the file's order
    start = timed[0].arrival
    return [_at(r, r.arrival - start) for r in timed] if start else timed


def _at(request: TraceRequest, arrival: float) -> TraceRequest:
    return replace(request, arrival=arrival)


def _object(row: object) -> dict[str, Any]:
    if isinstance(row, _BadLine):
        raise row
    if not isinstance(row, dict):
        raise _BadLine("each line must be a JSON object")
    return row


def _first(data: dict[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        value = data.get(name)
        if value not in (None, ""):
            return value
    return None


def _number(data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise _BadLine(f"{key} must be a non-negative number")
    return float(value)


def _count(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadLine(f"{key} must be a positive integer")
    return value


def _float(value: Any, what: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise _BadLine(f"{what} {value!r} is not a number") from None
    if not number >= 0 or number == float("inf"):
        raise _BadLine(f"{what} must be a non-negative number")
    return number


def _int(value: Any, what: str) -> int:
    try:
        number = int(float(value))
    except (ValueError, OverflowError):
        raise _BadLine(f"{what} {value!r} is not a number") from None
    if number < 1:
        raise _BadLine(f"{what} must be at least 1")
    return number
