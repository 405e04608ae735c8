"""Measurements of a real vLLM run, read for `vllm-sim calibrate`: what arrived when, with
how many prompt and output tokens, and what latencies the run measured.

Four layouts, told apart by the file (or `--format`):
- `vllm-bench`: the JSON `vllm bench serve --save-result --save-detailed` writes: per
  request `input_lens`, `output_lens`, `ttfts`, `itls` (and `errors`; newer releases also
  `start_times` and `latencies`), with the run's `request_rate`, `burstiness`,
  `max_concurrency` and `duration`. Without `start_times` the arrivals are rebuilt as the
  benchmark draws them (see `rebuilt_arrivals`).
- `requests-jsonl` / `requests-csv`: one request a line, with its arrival (or queued)
  time, its first- and last-token times (or its TTFT and latency), and its token counts,
  under the common spellings (LLMServingSim's `queued_s`, `first_token_s`,
  `last_token_s`; `vllm-sim replay`'s own `requests.csv`, `arrival`, `ttft`, `e2e`; ...).
- `metrics`: vLLM `/metrics` scrapes over time, each preceded by a line `# scrape <unix
  seconds>` (or a JSONL of `{"time": ..., "text": ...}`); the workload is rebuilt from the
  counters' growth between scrapes and the targets are the histograms' means per interval.

Everything that makes the data unusable is a MeasurementError with a one-line reason: the
file, its layout, a line that cannot be read, and times that contradict each other.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

from vllm_sim.whatif.trace import TraceRequest

MeasurementFormat = Literal["auto", "vllm-bench", "requests-jsonl", "requests-csv", "metrics"]
MEASUREMENT_FORMATS: tuple[MeasurementFormat, ...] = (
    "auto",
    "vllm-bench",
    "requests-jsonl",
    "requests-csv",
    "metrics",
)

# Per-request spellings, first match wins: the client's send time before the engine's
# receipt, absolute times before durations.
_ARRIVAL_S = (
    "arrival_s", "arrival", "arrival_time", "start_s", "start_time", "send_time", "sent_s",
    "queued_s", "queued", "queued_time", "enqueue_time",
)  # fmt: skip
_ARRIVAL_MS = ("timestamp", "timestamp_ms", "arrival_ms", "start_ms")
_FIRST_S = ("first_token_s", "first_token_time", "first_token_at", "first_token", "t_first_token")
_LAST_S = (
    "last_token_s", "last_token_time", "last_token_at", "last_token", "t_last_token",
    "end_time", "end_s", "finish_time", "finished_s", "completed_s",
)  # fmt: skip
_TTFT_S = ("ttft_s", "ttft", "time_to_first_token")
_TTFT_MS = ("ttft_ms", "time_to_first_token_ms")
_E2E_S = ("e2e_s", "e2e", "latency_s", "latency", "e2el", "e2e_latency")
_E2E_MS = ("e2e_ms", "latency_ms", "e2el_ms")
_INPUT = (
    "input_tokens", "input_length", "prompt_tokens", "input_len", "prompt_len",
    "num_prompt_tokens",
)  # fmt: skip
_OUTPUT = (
    "output_tokens", "output_length", "completion_tokens", "output_len", "num_output_tokens",
    "generated_tokens",
)  # fmt: skip
_ERROR = ("error", "errors")

# vLLM's series the metrics layout reads (summed over every label set).
SUCCESS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
# The inter-token histogram's name before vLLM renamed it, then the per-request one.
ITL_HISTOGRAMS = (
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:request_time_per_output_token_seconds",
)
E2E_HISTOGRAM = "vllm:e2e_request_latency_seconds"
# Keys only a vllm bench serve result has (its per-request lists, its summary).
_BENCH_KEYS = frozenset({"ttfts", "input_lens", "output_lens", "mean_ttft_ms", "request_rate"})
_SCRAPE = re.compile(r"^#\s*scrape\s+(\S+)\s*$")


class MeasurementError(ValueError):
    """The measurements cannot be used; `str(error)` is the one-line reason."""


@dataclass(frozen=True, slots=True)
class MeasuredRequest:
    """One completed request as the run measured it, in seconds."""

    line: int  # in the file (1-based; a vllm-bench request's position)
    arrival: float  # from the run's first arrival
    input_tokens: int
    output_tokens: int
    ttft: float
    e2e: float

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first; None for a one-token answer."""
        if self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class MetricsWindow:
    """What the counters and histograms grew by between two scrapes."""

    start: float  # seconds from the first scrape
    end: float
    requests: int  # completed in the window
    prompt_tokens: float  # per completed request
    output_tokens: float
    ttft: float | None  # histogram means in the window, seconds
    itl: float | None
    e2e: float | None
    ttft_count: float = 0.0
    itl_count: float = 0.0
    e2e_count: float = 0.0


@dataclass(slots=True)
class Measurements:
    format: MeasurementFormat
    path: Path
    # What the replay sends: arrival order, aligned with `requests` when per request.
    workload: list[TraceRequest]
    requests: list[MeasuredRequest] = field(default_factory=list)  # per-request targets
    windows: list[MetricsWindow] = field(default_factory=list)  # per-interval targets
    arrivals: str = "as recorded"  # how the arrival times were had, for the report
    max_concurrency: int | None = None  # a closed-loop client's cap, when rebuilt
    failed: int = 0  # requests the run reports as failed: left out
    duration: float = 0.0  # seconds from the first arrival to the last token
    # Metrics: where the workload's time 0 is on the windows' clock (from the first scrape).
    origin: float = 0.0

    @property
    def completed(self) -> int:
        if self.windows:
            return sum(w.requests for w in self.windows)
        return len(self.requests)

    @property
    def fittable(self) -> int:
        """Completed requests with a time per output token (at least 2 output tokens)."""
        if self.windows:
            return sum(w.requests for w in self.windows if w.output_tokens >= 2)
        return sum(1 for r in self.requests if r.output_tokens >= 2)


def read_measurements(path: Path, fmt: MeasurementFormat = "auto", seed: int = 0) -> Measurements:
    """The measurements in `path`; MeasurementError with the reason otherwise. `seed` draws
    the arrivals of a vllm-bench run saved without its send times."""
    try:
        if not path.is_file():
            raise MeasurementError(f"{path}: no such file")
        kind = detect_format(path) if fmt == "auto" else fmt
        if kind == "vllm-bench":
            measured = _read_vllm_bench(path, seed)
        elif kind == "metrics":
            measured = _read_metrics(path)
        else:
            measured = _read_requests(path, kind)
    except OSError as error:
        raise MeasurementError(f"{path}: cannot be read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise MeasurementError(f"{path}: not a text file") from None
    return measured


def detect_format(path: Path) -> MeasurementFormat:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "requests-csv"
    head = _head(path)
    stripped = head.lstrip()
    if _SCRAPE.match(stripped.split("\n", 1)[0]) or stripped.startswith(("# HELP", "# TYPE")):
        return "metrics"
    if stripped.startswith("{"):
        first = stripped.split("\n", 1)[0]
        try:
            row = json.loads(first)
        except ValueError:
            return "vllm-bench"  # a JSON document over several lines
        if isinstance(row, dict) and _BENCH_KEYS & set(row):
            return "vllm-bench"
        if isinstance(row, dict) and "text" in row and ("time" in row or "timestamp" in row):
            return "metrics"
        return "requests-jsonl"
    raise MeasurementError(
        f"{path}: not a measurements file (vllm-bench JSON, per-request JSONL or CSV, or "
        "/metrics scrapes); give --format"
    )


def _head(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.read(65536)


# ---------------------------------------------------------------------- vllm bench serve
def _read_vllm_bench(path: Path, seed: int) -> Measurements:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise MeasurementError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise MeasurementError(f"{path}: not a vllm bench serve result (a JSON object)")
    keys = ("input_lens", "output_lens", "ttfts", "itls")
    missing = [key for key in keys if key not in data]
    if missing:
        if "mean_ttft_ms" in data:
            raise MeasurementError(
                f"{path}: a vllm bench serve result without per-request figures: run it with "
                "--save-result --save-detailed"
            )
        raise MeasurementError(f"{path}: not a vllm bench serve result: no {', '.join(missing)}")
    columns = {key: data[key] for key in keys}
    count = len(columns["input_lens"])
    optional = {
        key: data[key]
        for key in ("errors", "start_times", "latencies")
        if isinstance(data.get(key), list)
    }
    for key, values in {**columns, **optional}.items():
        if not isinstance(values, list) or len(values) != count:
            raise MeasurementError(f"{path}: {key} must be a list of {count} values, one a request")
    duration = data.get("duration")
    run = float(duration) if _is_number(duration) and duration > 0 else math.inf
    starts = optional.get("start_times")
    sent: list[float] | None = None
    if starts is not None:
        sent = [_number_at(path, "start_times", i, starts[i]) for i in range(count)]
        arrivals_text = "as recorded (start_times)"
        closed: int | None = None
    else:
        sent, arrivals_text, closed = rebuilt_arrivals(path, data, count, seed)
    requests: list[MeasuredRequest] = []
    failed = 0
    errors = optional.get("errors") or [""] * count
    for i in range(count):
        if errors[i] not in (None, ""):
            failed += 1
            continue
        where = f"request {i + 1}"
        inputs = _count_at(path, "input_lens", i, columns["input_lens"][i])
        outputs = _count_at(path, "output_lens", i, columns["output_lens"][i])
        ttft = _number_at(path, "ttfts", i, columns["ttfts"][i])
        if ttft <= 0:
            raise MeasurementError(
                f"{path}: {where}: no time to first token (a run without streaming?)"
            )
        gaps = columns["itls"][i]
        if not isinstance(gaps, list):
            raise MeasurementError(f"{path}: itls of {where} must be a list of seconds")
        latencies = optional.get("latencies")
        if latencies is not None:
            e2e = _number_at(path, "latencies", i, latencies[i])
        else:
            e2e = ttft + sum(_number_at(path, "itls", i, gap) for gap in gaps)
        if e2e < ttft:
            raise MeasurementError(f"{path}: {where}: the last token comes before the first")
        if ttft > run:
            raise MeasurementError(
                f"{path}: {where}: a TTFT of {ttft:.3f} s, longer than the whole run ({run:.3f} s)"
            )
        requests.append(MeasuredRequest(i + 1, sent[i], inputs, outputs, ttft, e2e))
    return _per_request(path, "vllm-bench", requests, arrivals_text, closed, failed)


def rebuilt_arrivals(
    path: Path, data: Mapping[str, Any], count: int, seed: int
) -> tuple[list[float], str, int | None]:
    """Send times as `vllm bench serve` draws them when it saved none: gaps from a gamma
    distribution of shape `burstiness` and mean 1/rate (Poisson at burstiness 1), stretched
    so the last request goes at count/rate as the benchmark stretches them; all at once at
    an infinite rate; a ramp-up's rate per request. Seeded: the benchmark's own draws are
    not in the file, so only the run's statistics are rebuilt. With `max_concurrency` the
    client was closed-loop: that cap goes to the replay. Returns (times, words, cap)."""
    rate = _rate(path, data.get("request_rate", "inf"))
    burstiness = data.get("burstiness", 1.0)
    if burstiness is None:
        burstiness = 1.0
    if not _is_number(burstiness) or burstiness <= 0:
        raise MeasurementError(f"{path}: burstiness must be a positive number")
    cap = data.get("max_concurrency")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise MeasurementError(f"{path}: max_concurrency must be a positive integer or null")
    ramp = data.get("ramp_up_strategy")
    start_rps, end_rps = data.get("ramp_up_start_rps"), data.get("ramp_up_end_rps")
    if ramp is not None and not (
        ramp in ("linear", "exponential") and _is_number(start_rps) and _is_number(end_rps)
    ):
        raise MeasurementError(f"{path}: a ramp-up needs its strategy and start and end rates")
    low = float(start_rps) if _is_number(start_rps) else 0.0
    high = float(end_rps) if _is_number(end_rps) else 0.0
    draw = random.Random(seed)
    times: list[float] = []
    total = 0.0
    for i in range(count):
        current = rate
        if ramp is not None:
            progress = i / max(count - 1, 1)
            if ramp == "linear":
                current = low + (high - low) * progress
            elif low > 0:
                current = low * (high / low) ** progress
            else:
                current = 0.0
        if current <= 0:
            raise MeasurementError(f"{path}: a request rate of {current} cannot be rebuilt")
        if math.isinf(current):
            gap = 0.0
        elif math.isinf(burstiness):
            gap = 1.0 / current
        else:
            gap = draw.gammavariate(burstiness, 1.0 / (current * burstiness))
        total += gap
        times.append(total)
    if ramp is None and times and times[-1] > 0 and not math.isinf(rate):
        stretch = count / rate / times[-1]
        times = [t * stretch for t in times]
    first = times[0] if times else 0.0
    times = [t - first for t in times]
    if ramp is not None:
        words = f"rebuilt: {ramp} ramp-up from {low:g} to {high:g} req/s (seed {seed})"
    elif math.isinf(rate):
        words = "rebuilt: all sent at once (request rate inf)"
    else:
        shape = "Poisson" if burstiness == 1.0 else f"gamma, burstiness {burstiness:g},"
        words = f"rebuilt: {shape} at {rate:g} req/s (seed {seed})"
    if cap is not None:
        words += f", at most {cap} open (closed loop)"
    return times, words, cap


def _rate(path: Path, value: object) -> float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if not _is_number(value) or value <= 0:
        raise MeasurementError(
            f"{path}: no start_times, and request_rate {value!r} cannot rebuild the arrivals"
        )
    return float(value)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def _number_at(path: Path, key: str, index: int, value: object) -> float:
    if not _is_number(value) or not math.isfinite(value):
        raise MeasurementError(f"{path}: {key} of request {index + 1} is not a finite number")
    number = float(value)
    if number < 0:
        raise MeasurementError(f"{path}: {key} of request {index + 1} is negative")
    return number


def _count_at(path: Path, key: str, index: int, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MeasurementError(f"{path}: {key} of request {index + 1} is not a token count")
    if value < 1:
        raise MeasurementError(f"{path}: {key} of request {index + 1} is {value}, below 1")
    return value


# ---------------------------------------------------------------------- one request a line
class _BadRow(ValueError):
    pass


def _read_requests(path: Path, kind: MeasurementFormat) -> Measurements:
    rows = _csv_rows(path) if kind == "requests-csv" else _json_rows(path)
    raw: list[tuple[int, float, int, int, float, float]] = []
    failed = 0
    for number, row in rows:
        try:
            parsed = _request_row(row)
        except _BadRow as error:
            raise MeasurementError(f"{path}: line {number}: {error}") from None
        if parsed is None:
            failed += 1
            continue
        raw.append((number, *parsed))
    if not raw and not failed:
        raise MeasurementError(f"{path}: no request in the file")
    requests = [MeasuredRequest(*row) for row in raw]
    return _per_request(path, kind, requests, "as recorded", None, failed)


def _json_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except ValueError as error:
                raise MeasurementError(f"{path}: line {number}: not JSON ({error})") from None
            if not isinstance(row, dict):
                raise MeasurementError(f"{path}: line {number}: not a JSON object")
            yield number, row


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        sample = handle.read(4096)
        handle.seek(0)
        delimiter = "\t" if "\t" in sample.split("\n", 1)[0] else ","
        reader = csv.DictReader(handle, delimiter=delimiter)
        if not reader.fieldnames:
            raise MeasurementError(f"{path}: no header line")
        header = {name.strip().lower() for name in reader.fieldnames if name}
        for names, what in (
            (_ARRIVAL_S + _ARRIVAL_MS, "arrival"),
            (_INPUT, "input tokens"),
            (_OUTPUT, "output tokens"),
            (_FIRST_S + _TTFT_S + _TTFT_MS, "first token"),
            (_LAST_S + _E2E_S + _E2E_MS, "last token"),
        ):
            if not header & set(names):
                raise MeasurementError(
                    f"{path}: not a per-request file: no {what} column (one of {', '.join(names)})"
                )
        for row in reader:
            yield (
                reader.line_num,
                {(key or "").strip().lower(): value for key, value in row.items()},
            )


def _request_row(row: dict[str, Any]) -> tuple[float, int, int, float, float] | None:
    """(arrival, input tokens, output tokens, ttft, e2e) of a completed request; None for
    one the run reports as failed."""
    if row.get("success") in (False, "false", "False", "0", 0):
        return None
    error = _first(row, _ERROR)
    if error not in (None, "", "null", "None"):
        return None
    arrival = _time(row, _ARRIVAL_S, 1.0, "arrival")
    if arrival is None:
        arrival = _time(row, _ARRIVAL_MS, 0.001, "arrival")
    if arrival is None:
        raise _BadRow(f"no arrival (one of {', '.join(_ARRIVAL_S + _ARRIVAL_MS)})")
    inputs = _tokens(row, _INPUT, "input tokens")
    outputs = _tokens(row, _OUTPUT, "output tokens")
    first = _time(row, _FIRST_S, 1.0, "first token")
    if first is not None:
        if first < arrival:
            raise _BadRow("the first token comes before the arrival")
        ttft = first - arrival
    else:
        relative = _time(row, _TTFT_S, 1.0, "ttft")
        if relative is None:
            relative = _time(row, _TTFT_MS, 0.001, "ttft")
        if relative is None:
            raise _BadRow(
                f"no first-token time (one of {', '.join(_FIRST_S + _TTFT_S + _TTFT_MS)})"
            )
        ttft = relative
    last = _time(row, _LAST_S, 1.0, "last token")
    if last is not None:
        e2e = last - arrival
    else:
        relative = _time(row, _E2E_S, 1.0, "latency")
        if relative is None:
            relative = _time(row, _E2E_MS, 0.001, "latency")
        if relative is None:
            raise _BadRow(f"no last-token time (one of {', '.join(_LAST_S + _E2E_S + _E2E_MS)})")
        e2e = relative
    if e2e < ttft:
        raise _BadRow("the last token comes before the first")
    if ttft <= 0:
        raise _BadRow("no time to first token (0)")
    return arrival, inputs, outputs, ttft, e2e


def _first(row: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        value = row.get(name)
        if value not in (None, ""):
            return value
    return None


def _time(row: Mapping[str, Any], names: tuple[str, ...], scale: float, what: str) -> float | None:
    value = _first(row, names)
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _BadRow(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise _BadRow(f"{what} is not finite")
    if number < 0:
        raise _BadRow(f"{what} is negative")
    return number * scale


def _tokens(row: Mapping[str, Any], names: tuple[str, ...], what: str) -> int:
    value = _first(row, names)
    if value is None:
        raise _BadRow(f"no {what} (one of {', '.join(names)})")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _BadRow(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number) or number != int(number):
        raise _BadRow(f"{what} {value!r} is not a whole number")
    if number < 1:
        raise _BadRow(f"{what} is {int(number)}, below 1")
    return int(number)


def _per_request(
    path: Path,
    kind: MeasurementFormat,
    requests: list[MeasuredRequest],
    arrivals: str,
    closed: int | None,
    failed: int,
) -> Measurements:
    """The measurements of completed requests, in arrival order (ties keep the file's)."""
    requests = sorted(requests, key=lambda r: r.arrival)
    origin = requests[0].arrival if requests else 0.0
    if origin:
        requests = [
            MeasuredRequest(
                r.line, r.arrival - origin, r.input_tokens, r.output_tokens, r.ttft, r.e2e
            )
            for r in requests
        ]
    duration = max((r.arrival + r.e2e for r in requests), default=0.0)
    workload = [TraceRequest(r.line, r.arrival, r.input_tokens, r.output_tokens) for r in requests]
    return Measurements(kind, path, workload, requests, [], arrivals, closed, failed, duration)


# ---------------------------------------------------------------------- /metrics scrapes
@dataclass(frozen=True, slots=True)
class _Scrape:
    time: float
    where: str  # "line N" or "scrape N", for errors
    values: dict[str, float]


def _read_metrics(path: Path) -> Measurements:
    scrapes = [_parse_scrape(path, t, where, text) for t, where, text in _snapshots(path)]
    if len(scrapes) < 2:
        raise MeasurementError(
            f"{path}: {len(scrapes)} scrape(s): the workload comes from the counters' growth "
            "between scrapes, so at least 2 are needed"
        )
    for before, after in itertools.pairwise(scrapes):
        if after.time <= before.time:
            raise MeasurementError(
                f"{path}: {after.where}: its time does not follow the one before"
            )
    itl_name = next(
        (name for name in ITL_HISTOGRAMS if f"{name}_count" in scrapes[-1].values), None
    )
    origin = scrapes[0].time
    windows: list[MetricsWindow] = []
    for before, after in itertools.pairwise(scrapes):
        grown = {
            key: after.values.get(key, 0.0) - before.values.get(key, 0.0) for key in after.values
        }
        for key, value in grown.items():
            if value < -1e-9 and key in before.values:
                raise MeasurementError(
                    f"{path}: {after.where}: {key} went down since the scrape before (a "
                    "server restart?)"
                )
        done = round(grown.get(SUCCESS, 0.0))
        if done <= 0:
            windows.append(
                MetricsWindow(
                    before.time - origin, after.time - origin, 0, 0.0, 0.0, None, None, None
                )
            )
            continue
        prompt = grown.get(PROMPT_TOKENS, 0.0) / done
        output = grown.get(GENERATION_TOKENS, 0.0) / done
        if prompt < 1 or output < 1:
            raise MeasurementError(
                f"{path}: {after.where}: {done} requests completed with {prompt:.1f} prompt and "
                f"{output:.1f} output tokens each: the token counters are missing or inconsistent"
            )
        ttft, ttft_n = _mean(grown, TTFT_HISTOGRAM)
        itl, itl_n = _mean(grown, itl_name) if itl_name else (None, 0.0)
        e2e, e2e_n = _mean(grown, E2E_HISTOGRAM)
        if ttft is not None and e2e is not None and ttft > e2e:
            raise MeasurementError(
                f"{path}: {after.where}: a mean TTFT of {ttft:.3f} s, longer than the mean "
                f"latency ({e2e:.3f} s)"
            )
        if ttft is not None and ttft > after.time - origin:
            raise MeasurementError(
                f"{path}: {after.where}: a mean TTFT of {ttft:.3f} s, longer than the whole run"
            )
        windows.append(
            MetricsWindow(
                before.time - origin,
                after.time - origin,
                done,
                prompt,
                output,
                ttft,
                itl,
                e2e,
                ttft_n,
                itl_n,
                e2e_n,
            )
        )
    if not any(w.ttft is not None for w in windows):
        raise MeasurementError(f"{path}: no {TTFT_HISTOGRAM} observations between the scrapes")
    workload, start = _window_workload(windows)
    duration = scrapes[-1].time - origin
    return Measurements(
        "metrics",
        path,
        workload,
        [],
        windows,
        "rebuilt from the counters: each interval's completions spread evenly over it, sent "
        "one mean latency earlier, with the interval's mean token counts",
        None,
        0,
        duration,
        start,
    )


def _mean(grown: Mapping[str, float], name: str) -> tuple[float | None, float]:
    count = grown.get(f"{name}_count", 0.0)
    if count <= 0:
        return None, 0.0
    return grown.get(f"{name}_sum", 0.0) / count, count


def _window_workload(windows: list[MetricsWindow]) -> tuple[list[TraceRequest], float]:
    """Each window's completions as requests: ended evenly over the window, so sent one
    mean latency (the window's E2E) before, with the window's mean token counts; and when
    the first is sent, on the windows' clock."""
    sends: list[tuple[float, int, int]] = []
    for w in windows:
        if w.requests <= 0:
            continue
        latency = w.e2e or 0.0
        span = w.end - w.start
        for j in range(w.requests):
            ended = w.start + (j + 0.5) * span / w.requests
            sends.append(
                (ended - latency, max(round(w.prompt_tokens), 1), max(round(w.output_tokens), 1))
            )
    sends.sort(key=lambda s: s[0])
    origin = sends[0][0] if sends else 0.0
    return [TraceRequest(i + 1, t - origin, p, o) for i, (t, p, o) in enumerate(sends)], origin


def _snapshots(path: Path) -> Iterator[tuple[float, str, str]]:
    """(unix seconds, where, exposition text) of each scrape in the file."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("{"):
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as error:
                raise MeasurementError(f"{path}: line {number}: not JSON ({error})") from None
            when = row.get("time", row.get("timestamp")) if isinstance(row, dict) else None
            body = row.get("text") if isinstance(row, dict) else None
            if not _is_number(when) or not isinstance(body, str):
                raise MeasurementError(
                    f'{path}: line {number}: expected {{"time": unix seconds, "text": the '
                    "/metrics text}"
                )
            yield float(when), f"line {number}", body
        return
    current: tuple[float, int] | None = None
    body_lines: list[str] = []
    for number, line in enumerate(lines, 1):
        match = _SCRAPE.match(line.strip())
        if match is not None:
            if current is not None:
                yield current[0], f"scrape at line {current[1]}", "\n".join(body_lines) + "\n"
            try:
                when = float(match.group(1))
            except ValueError:
                when = math.nan
            if not math.isfinite(when):
                raise MeasurementError(f"{path}: line {number}: the scrape's time is not a number")
            current, body_lines = (when, number), []
        elif current is None:
            if line.strip():
                raise MeasurementError(
                    f"{path}: line {number}: expected '# scrape <unix seconds>' before each "
                    "/metrics text"
                )
        else:
            body_lines.append(line)
    if current is not None:
        yield current[0], f"scrape at line {current[1]}", "\n".join(body_lines) + "\n"


def _parse_scrape(path: Path, when: float, where: str, text: str) -> _Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    histograms = (TTFT_HISTOGRAM, E2E_HISTOGRAM, *ITL_HISTOGRAMS)
    wanted = {SUCCESS, PROMPT_TOKENS, GENERATION_TOKENS}
    wanted |= {f"{name}_{part}" for name in histograms for part in ("sum", "count")}
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError) as error:
        raise MeasurementError(f"{path}: {where}: not Prometheus text ({error})") from None
    if SUCCESS not in values:
        raise MeasurementError(f"{path}: {where}: no {SUCCESS} (is this vLLM's /metrics?)")
    if not all(math.isfinite(v) for v in values.values()):
        raise MeasurementError(f"{path}: {where}: a series is not finite")
    return _Scrape(when, where, values)
