"""The fake-metrics object: its typed form, decoding and JSON encoding.

It arrives as a JSON object (`--fake-metrics`, `POST /admin/config`) or as a YAML mapping whose
`loras` are JSON strings. Every field is `None` when absent, so a decoded partial update and a
full object share one type; `()` means "given, but empty", which matters for updates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from .durations import Duration, format_duration, parse_duration
from .gosyntax import INT64_MAX, INT64_MIN, format_go_float, parse_go_float

GENERATOR_FUNCTIONS = ("oscillate", "ramp", "rampreset", "squarewave")
FINISH_REASONS = ("stop", "length", "tool_calls", "remote_decode", "cache_threshold")


class FakeMetricsError(ValueError):
    """The fake-metrics object has the wrong shape (a type mismatch or a malformed generator)."""


@dataclass(frozen=True, slots=True)
class FakeGenerator:
    """`function:start:end:period`; the function name is checked by validation, not here."""

    function: str
    start: float
    end: float
    period: int  # nanoseconds, as Go's time.Duration

    @property
    def period_seconds(self) -> float:
        return Duration(self.period).seconds

    def __str__(self) -> str:
        start, end = format_go_float(self.start), format_go_float(self.end)
        return f"{self.function}:{start}:{end}:{format_duration(self.period)}"


FakeGauge = float | FakeGenerator
"""A gauge is either a fixed value or a generator."""


@dataclass(frozen=True, slots=True)
class FakeLora:
    """One `vllm:lora_requests_info` series: comma-separated adapter lists and its value."""

    running: str = ""
    waiting: str = ""
    timestamp: float = 0.0


# Field metadata naming the decoder of each key.
_GAUGE, _INTS, _INT = {"kind": "gauge"}, {"kind": "ints"}, {"kind": "int"}
_COUNTS, _LORAS = {"kind": "counts"}, {"kind": "loras"}


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeMetrics:
    """Fake values to expose instead of real ones. Attribute `x_y` is the JSON/YAML key `x-y`.

    Bucket arrays hold per-bucket counts (not cumulative). `request_success_total` is a tuple
    of `(finish_reason, count)` pairs so the whole config stays immutable.
    """

    running_requests: FakeGauge | None = field(default=None, metadata=_GAUGE)
    waiting_requests: FakeGauge | None = field(default=None, metadata=_GAUGE)
    kv_cache_usage: FakeGauge | None = field(default=None, metadata=_GAUGE)
    loras: tuple[FakeLora, ...] | None = field(default=None, metadata=_LORAS)
    ttft_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    tpot_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    request_tpot_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    e2erl_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    queue_time_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    inf_time_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    prefill_time_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    decode_time_buckets_values: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    request_prompt_tokens: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    request_generation_tokens: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    request_params_max_tokens: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    request_max_generation_tokens: tuple[int, ...] | None = field(default=None, metadata=_INTS)
    total_prompt_tokens: int | None = field(default=None, metadata=_INT)
    total_generation_tokens: int | None = field(default=None, metadata=_INT)
    request_success_total: tuple[tuple[str, int], ...] | None = field(
        default=None, metadata=_COUNTS
    )
    prefix_cache_hits: int | None = field(default=None, metadata=_INT)
    prefix_cache_queries: int | None = field(default=None, metadata=_INT)


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for mismatch messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"


def _mismatch(key: str, value: object, go_type: str) -> FakeMetricsError:
    return FakeMetricsError(
        f"fake-metrics: cannot unmarshal {json_type(value)} into {key!r} of type {go_type}"
    )


def is_int(value: object) -> bool:
    """A JSON/YAML integer that fits int64 (bools are not integers here)."""
    return (
        isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX
    )


def parse_generator(text: str) -> FakeGenerator:
    """Split `func:start:end:period`; errors carry the reference's prefix."""
    parts = text.split(":")
    try:
        if len(parts) != 4:
            raise ValueError("need func:start:end:period in fake metric generation function")
        start, end = parse_go_float(parts[1]), parse_go_float(parts[2])
        if not (math.isfinite(start) and math.isfinite(end)):
            raise ValueError("start and end must be finite numbers")
        period = parse_duration(parts[3])
    except ValueError as error:
        raise FakeMetricsError(
            f"unknown format in fake metric generation function: {error}"
        ) from None
    return FakeGenerator(parts[0], start, end, period)


def finite_number(value: object) -> float | None:
    """A JSON/YAML number as a finite float; None for anything else, an integer beyond
    float range (10**400) included."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _gauge(key: str, value: object, from_yaml: bool) -> FakeGauge:
    number = finite_number(value)
    if number is not None:
        return number
    if not isinstance(value, str):
        raise _mismatch(key, value, "number or generator string")
    if from_yaml:  # a YAML scalar that reads as a number is a fixed value, quoted or not
        try:
            number = parse_go_float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return number
    return parse_generator(value)


def _ints(key: str, value: object, from_yaml: bool) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(is_int(item) for item in value):
        raise _mismatch(key, value, "[]int")
    return tuple(value)


def _int(key: str, value: object, from_yaml: bool) -> int:
    if not is_int(value):
        raise _mismatch(key, value, "int64")
    assert isinstance(value, int)
    return value


def _counts(key: str, value: object, from_yaml: bool) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(name, str) and is_int(count) for name, count in value.items()
    ):
        raise _mismatch(key, value, "map[string]int64")
    return tuple(value.items())


def _lora(item: object, from_yaml: bool) -> FakeLora:
    if from_yaml:  # YAML carries each entry as a JSON string
        if not isinstance(item, str):
            raise _mismatch("loras", item, "[]string")
        try:
            item = json.loads(item)
        except ValueError as error:
            raise FakeMetricsError(f"fake-metrics: invalid loras entry: {error}") from None
    if not isinstance(item, dict):
        raise _mismatch("loras", item, "LorasMetrics object")
    running, waiting = item.get("running", ""), item.get("waiting", "")
    timestamp = item.get("timestamp", 0.0)
    if not (isinstance(running, str) and isinstance(waiting, str)):
        raise _mismatch("loras", item, "running/waiting strings")
    seconds = finite_number(timestamp)
    if seconds is None:
        raise _mismatch("loras", timestamp, "float64 timestamp")
    return FakeLora(running, waiting, seconds)


def _loras(key: str, value: object, from_yaml: bool) -> tuple[FakeLora, ...]:
    if not isinstance(value, list):
        raise _mismatch(key, value, "[]LorasMetrics")
    return tuple(_lora(item, from_yaml) for item in value)


_DECODERS: dict[str, Callable[[str, Any, bool], Any]] = {
    "gauge": _gauge,
    "ints": _ints,
    "int": _int,
    "counts": _counts,
    "loras": _loras,
}


def key_of(attr: str) -> str:
    return attr.replace("_", "-")


def decode_fake_metrics(data: object, *, from_yaml: bool = False) -> FakeMetrics:
    """Build a FakeMetrics from decoded JSON/YAML; unknown keys are ignored, null = absent."""
    if not isinstance(data, dict):
        raise FakeMetricsError(
            f"fake-metrics: cannot unmarshal {json_type(data)} into an object of fake metrics"
        )
    values: dict[str, Any] = {}
    for spec in fields(FakeMetrics):
        raw = data.get(key_of(spec.name))
        if raw is not None:
            values[spec.name] = _DECODERS[spec.metadata["kind"]](key_of(spec.name), raw, from_yaml)
    return FakeMetrics(**values)


def _encode(value: object) -> object:
    if isinstance(value, FakeGenerator):
        return str(value)
    if isinstance(value, FakeLora):
        return {"running": value.running, "timestamp": value.timestamp, "waiting": value.waiting}
    if isinstance(value, tuple):
        return [_encode(item) for item in value]
    return value


# Go marshals these pointer fields with `omitempty`; the others show up as null when unset.
_OMIT_WHEN_UNSET = frozenset(
    {"total_prompt_tokens", "total_generation_tokens", "prefix_cache_hits", "prefix_cache_queries"}
)


def fake_metrics_to_json(metrics: FakeMetrics) -> dict[str, object]:
    """The object GET /admin/config shows: generators as strings, keys sorted."""
    out: dict[str, object] = {}
    for spec in fields(FakeMetrics):
        value = getattr(metrics, spec.name)
        if value is None and spec.name in _OMIT_WHEN_UNSET:
            continue
        if spec.metadata["kind"] == "counts" and value is not None:
            out[key_of(spec.name)] = dict(sorted(value))
        else:
            out[key_of(spec.name)] = None if value is None else _encode(value)
    return dict(sorted(out.items()))
