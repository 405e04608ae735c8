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
runs unless the reader is strict (`--strict` refuses the trace at its first bad line).
Every number is range-checked: finite (no NaN or Infinity), non-negative, and below a cap:
- lines at most `MAX_LINE_CHARS` (2^26) characters (a longer one is read in pieces
  and dropped, never held whole);
- token counts (prompt, output, max_tokens) from 1 to `MAX_TOKENS` (10^7);
- `hash_ids`: at most `MAX_TOKENS / 512 + 1` of them, each below 2^63;
- times: at most `MAX_TIMESTAMP_MS` (10^13 ms, i.e. 10^10 s: epoch times included), and
  all in one unit: a line whose time lies more than `MAX_SPAN_SECONDS` (30 days) from
  the trace's median time (an epoch-millisecond value among relative ones, or the other
  way round) is a bad line.
Arrivals are sorted (ties keep the file's order). The file is read a line at a time and
each request is kept in compact columns (`TraceRequests`, about 28 bytes a request plus
8 a block id), never the lines' text, so memory grows with the requests, not the file.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

TraceFormat = Literal["auto", "mooncake", "csv", "openai"]
TRACE_FORMATS: tuple[TraceFormat, ...] = ("auto", "mooncake", "csv", "openai")
Endpoint = Literal["chat", "completion"]

# Mooncake's traces hash prompts in blocks of this many tokens.
MOONCAKE_BLOCK = 512
# Caps on a trace's numbers (see the module's docstring).
MAX_TOKENS = 10_000_000
MAX_HASH_IDS = MAX_TOKENS // MOONCAKE_BLOCK + 1
MAX_HASH_ID = 2**63 - 1
MAX_TIMESTAMP_MS = 1e13
MAX_SPAN_SECONDS = 30 * 86400.0
MAX_LINE_CHARS = 1 << 26  # 64 Mi characters: a longer line is a bad line, read in pieces

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


class TraceRequests(Sequence[TraceRequest]):
    """A trace's requests in compact columns (arrays), a TraceRequest made on access."""

    def __init__(self) -> None:
        self.lines = array("I")  # 4 bytes each: up to 4.29e9 lines
        self.arrivals = array("d")
        self.inputs = array("i")  # at most MAX_TOKENS
        self.outputs = array("i")  # -1: none
        self.hash_starts = array("q", [0])  # request i's ids: hash_ids[starts[i]:starts[i+1]]
        self.hash_ids = array("q")
        self.bodies: list[tuple[dict[str, Any], Endpoint] | None] | None = None

    def append(self, request: TraceRequest) -> None:
        self.lines.append(request.line)
        self.arrivals.append(request.arrival)
        self.inputs.append(request.input_length)
        self.outputs.append(-1 if request.output_length is None else request.output_length)
        self.hash_ids.extend(request.hash_ids)
        self.hash_starts.append(len(self.hash_ids))
        if request.body is not None and request.endpoint is not None:
            if self.bodies is None:
                self.bodies = [None] * (len(self.lines) - 1)
            self.bodies.append((request.body, request.endpoint))
        elif self.bodies is not None:
            self.bodies.append(None)

    def __len__(self) -> int:
        return len(self.lines)

    @overload
    def __getitem__(self, index: int) -> TraceRequest: ...
    @overload
    def __getitem__(self, index: slice) -> list[TraceRequest]: ...
    def __getitem__(self, index: int | slice) -> TraceRequest | list[TraceRequest]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self.lines):
            raise IndexError(index)
        output = self.outputs[index]
        start, end = self.hash_starts[index], self.hash_starts[index + 1]
        body = self.bodies[index] if self.bodies is not None else None
        return TraceRequest(
            self.lines[index],
            self.arrivals[index],
            self.inputs[index],
            None if output < 0 else output,
            tuple(self.hash_ids[start:end]) if end > start else (),
            body[0] if body is not None else None,
            body[1] if body is not None else None,
        )

    def reordered(self, order: Sequence[int], shift: float) -> TraceRequests:
        """The requests in `order` (indices), each arrival less `shift`."""
        if isinstance(order, range) and order == range(len(self)):  # in place: no copy
            if shift:
                arrivals = self.arrivals
                for i in order:
                    arrivals[i] -= shift
            return self
        out = TraceRequests()
        for i in order:
            out.lines.append(self.lines[i])
            out.arrivals.append(self.arrivals[i] - shift)
            out.inputs.append(self.inputs[i])
            out.outputs.append(self.outputs[i])
            out.hash_ids.extend(self.hash_ids[self.hash_starts[i] : self.hash_starts[i + 1]])
            out.hash_starts.append(len(out.hash_ids))
        if self.bodies is not None:
            out.bodies = [self.bodies[i] for i in order]
        return out


@dataclass(slots=True)
class Trace:
    requests: Sequence[TraceRequest]
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
    problems: list[tuple[int, str]] = []
    requests = TraceRequests()
    timed = bytearray()  # 1 where the line gave its own time
    lines = _csv_rows(path) if kind == "csv" else _json_rows(path)
    parse = _PARSERS[kind]
    gap = 1.0 / rate if rate else 0.0
    previous: float | None = None
    for number, row in lines:
        try:
            request = parse(number, row)
        except _BadLine as error:
            if strict:
                raise TraceError(f"{path}: line {number}: {error}") from None
            problems.append((number, str(error)))
            continue
        arrival = request.arrival
        own = arrival >= 0
        if not own:  # no time of its own: 1/rate after the one before (at once without)
            arrival = 0.0 if previous is None else previous + gap
            request = TraceRequest(
                request.line,
                arrival,
                request.input_length,
                request.output_length,
                request.hash_ids,
                request.body,
                request.endpoint,
            )
        previous = arrival
        requests.append(request)
        timed.append(own)
        if limit is not None and len(requests) >= limit:
            break
    requests = _in_one_unit(path, requests, timed, strict, problems)
    problems.sort()
    texts = [f"line {number}: {why}" for number, why in problems]
    if not len(requests):
        why = f" ({texts[0]})" if texts else ""
        raise TraceError(f"{path}: no request could be read{why}")
    order: Sequence[int] = range(len(requests))
    arrivals = requests.arrivals
    if any(arrivals[i] > arrivals[i + 1] for i in range(len(arrivals) - 1)):
        order = sorted(order, key=arrivals.__getitem__)  # stable: ties keep the file's order
    start = arrivals[order[0]]
    return Trace(requests.reordered(order, start), texts)


def _in_one_unit(
    path: Path,
    requests: TraceRequests,
    timed: bytearray,
    strict: bool,
    problems: list[tuple[int, str]],
) -> TraceRequests:
    """The requests whose own times lie within MAX_SPAN_SECONDS of the trace's median
    time; the others (another unit, another epoch) are bad lines."""
    low, high = math.inf, -math.inf
    for arrival, t in zip(requests.arrivals, timed, strict=True):
        if t:
            low, high = min(low, arrival), max(high, arrival)
    if high - low <= MAX_SPAN_SECONDS or low > high:
        return requests
    own = sorted(a for a, t in zip(requests.arrivals, timed, strict=True) if t)
    median = own[len(own) // 2]
    del own
    keep = []
    for i, (arrival, t) in enumerate(zip(requests.arrivals, timed, strict=True)):
        if t and abs(arrival - median) > MAX_SPAN_SECONDS:
            why = (
                f"time {arrival:.6g} s is over {MAX_SPAN_SECONDS / 86400:.0f} days from the "
                f"trace's median time {median:.6g} s (another unit or epoch?)"
            )
            if strict:
                raise TraceError(f"{path}: line {requests.lines[i]}: {why}")
            problems.append((requests.lines[i], why))
        else:
            keep.append(i)
    return requests.reordered(keep, 0.0)


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
        number = 0
        while text := handle.readline(MAX_LINE_CHARS):
            number += 1
            if len(text) == MAX_LINE_CHARS and not text.endswith("\n"):
                while (rest := handle.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                    pass  # the rest of the line, read and dropped a bounded piece at a time
                yield number, _BadLine(f"longer than {MAX_LINE_CHARS} characters")
                continue
            if not text.strip():
                continue
            try:
                yield number, json.loads(text)
            except (ValueError, RecursionError) as error:
                yield number, _BadLine(f"not JSON ({_shown(str(error))})")


def _csv_rows(path: Path) -> Iterator[tuple[int, object]]:
    with path.open(newline="", encoding="utf-8", errors="replace") as handle:
        sample = handle.read(4096)
        handle.seek(0)
        delimiter = "\t" if "\t" in sample.split("\n", 1)[0] else ","
        reader = csv.DictReader(handle, delimiter=delimiter)
        last = 0
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as error:  # a field over csv's size limit, a stray NUL...
                # The reader does not count the line it fails on.
                last = reader.line_num if reader.line_num > last else last + 1
                yield last, _BadLine(f"not CSV ({error})")
                continue
            last = reader.line_num
            yield last, row


def _mooncake(number: int, row: object) -> TraceRequest:
    data = _object(row)
    hash_ids = data.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_HASH_ID for h in hash_ids
    ):
        raise _BadLine("hash_ids must be a list of non-negative integers (below 2^63)")
    if len(hash_ids) > MAX_HASH_IDS:
        raise _BadLine(f"hash_ids holds {len(hash_ids)} blocks, more than {MAX_HASH_IDS}")
    return TraceRequest(
        number,
        _number(data, "timestamp", 0.0, MAX_TIMESTAMP_MS) / 1000.0,
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
        _float(arrival, "arrival", MAX_TIMESTAMP_MS * 0.001 / scale) * scale,
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
        not isinstance(output, int) or isinstance(output, bool) or not 1 <= output <= MAX_TOKENS
    ):
        raise _BadLine(f"max_tokens must be a positive integer (at most {MAX_TOKENS})")
    timestamp = data.get("timestamp")
    arrival = (
        -1.0 if timestamp is None else _number(data, "timestamp", 0.0, MAX_TIMESTAMP_MS) / 1000.0
    )
    return TraceRequest(number, arrival, min(max(words, 1), MAX_TOKENS), output, (), body, endpoint)


_PARSERS = {"mooncake": _mooncake, "csv": _csv, "openai": _openai}


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


def _number(data: dict[str, Any], key: str, default: float, cap: float) -> float:
    value = data.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= cap  # NaN fails too
    ):
        raise _BadLine(f"{key} must be a non-negative number (finite, at most {cap:g})")
    return float(value)


def _count(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadLine(f"{key} must be a positive integer")
    if value > MAX_TOKENS:
        raise _BadLine(f"{key} {_shown(value)} is above the limit of {MAX_TOKENS} tokens")
    return value


def _float(value: Any, what: str, cap: float) -> float:
    try:
        number = float(value)
    except ValueError:
        raise _BadLine(f"{what} {_shown(value)} is not a number") from None
    if not 0 <= number <= cap:  # NaN and infinities fail too
        raise _BadLine(f"{what} must be a non-negative number (finite, at most {cap:g})")
    return number


def _int(value: Any, what: str) -> int:
    try:
        number = float(value)
    except ValueError:
        raise _BadLine(f"{what} {_shown(value)} is not a number") from None
    if not math.isfinite(number) or number != int(number):
        raise _BadLine(f"{what} {_shown(value)} is not a whole number")
    if number < 1:
        raise _BadLine(f"{what} must be at least 1")
    if number > MAX_TOKENS:
        raise _BadLine(f"{what} {_shown(value)} is above the limit of {MAX_TOKENS}")
    return int(number)


def _shown(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 128:
        return f"(an integer of {value.bit_length()} bits)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
