"""Fake-metrics validation, partial updates from /admin/config and the startup zero-fill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from .fake_metrics import (
    FINISH_REASONS,
    GENERATOR_FUNCTIONS,
    FakeGauge,
    FakeGenerator,
    FakeMetrics,
    key_of,
)

TTFT_MAX_ENTRIES = 23  # 22 bucket bounds + the +Inf bucket
TPOT_MAX_ENTRIES = 20  # 19 bucket bounds + the +Inf bucket

# The arrays checked only for negative entries, in the reference's order.
_PLAIN_ARRAYS = (
    "request_prompt_tokens",
    "request_generation_tokens",
    "request_params_max_tokens",
    "request_max_generation_tokens",
    "e2erl_buckets_values",
    "queue_time_buckets_values",
    "inf_time_buckets_values",
    "prefill_time_buckets_values",
    "decode_time_buckets_values",
    "request_tpot_buckets_values",
)
# A token histogram and the counter it derives. An update that gives the array but not the
# counter drops the old counter, so the counter is derived from the new array again.
_TOKEN_TOTALS = (
    ("request_prompt_tokens", "total_prompt_tokens"),
    ("request_generation_tokens", "total_generation_tokens"),
)


def _fixed(gauge: FakeGauge | None) -> float | None:
    return gauge if isinstance(gauge, float) else None


def _check_fixed_gauges(metrics: FakeMetrics) -> str | None:
    counters = (_fixed(metrics.running_requests), _fixed(metrics.waiting_requests))
    if any(value is not None and value < 0 for value in counters):
        return "fake metrics request counters cannot be negative"
    usage = _fixed(metrics.kv_cache_usage)
    if usage is not None and not 0 <= usage <= 1:
        return "fake metrics KV cache usage must be between 0 and 1"
    return None


def _generator_error(generator: FakeGenerator) -> str | None:
    if generator.function not in GENERATOR_FUNCTIONS:
        return (
            f"invalid fake metrics generation function {generator.function}, "
            f"must be one of the following: {', '.join(GENERATOR_FUNCTIONS)}"
        )
    if generator.start < 0 or generator.end < 0 or generator.period < 0:
        return "invalid fake metrics generation parameter: start and end must not be negative"
    if generator.period == 0:
        return "invalid fake metrics generation parameter: period must be positive"
    return None


def _check_generators(metrics: FakeMetrics) -> str | None:
    for gauge in (metrics.running_requests, metrics.waiting_requests, metrics.kv_cache_usage):
        if isinstance(gauge, FakeGenerator) and (error := _generator_error(gauge)):
            return error
    usage = metrics.kv_cache_usage
    if isinstance(usage, FakeGenerator) and not (0 <= usage.start <= 1 and 0 <= usage.end <= 1):
        return "fake metrics KV cache usage start and end must be between 0 and 1"
    return None


def _check_ttft(metrics: FakeMetrics) -> str | None:
    values = metrics.ttft_buckets_values or ()
    if len(values) > TTFT_MAX_ENTRIES:
        return "fake time-to-first-token array is too long"
    if any(value < 0 for value in values):
        return "time-to-first-token fake metrics should contain only non-negative values"
    return None


def _check_tpot(metrics: FakeMetrics) -> str | None:
    values = metrics.tpot_buckets_values or ()
    if len(values) > TPOT_MAX_ENTRIES:
        return "fake time-per-output-token array is too long"
    if any(value < 0 for value in values):
        return "time-per-output-token fake metrics should contain only non-negative values"
    return None


def _check_success(metrics: FakeMetrics) -> str | None:
    for reason, count in metrics.request_success_total or ():
        if count < 0:
            return f"fake metrics request-success-total.{reason} cannot be negative, got {count}"
        if reason not in FINISH_REASONS:
            return (
                f"invalid finish reason in request-success-total: {reason} "
                f"(valid reasons: [{' '.join(FINISH_REASONS)}])"
            )
    return None


def _check_plain_arrays(metrics: FakeMetrics) -> str | None:
    for attr in _PLAIN_ARRAYS:
        if any(value < 0 for value in getattr(metrics, attr) or ()):
            return f"fake metrics {key_of(attr)} cannot contain negative values"
    return None


def _check_totals(metrics: FakeMetrics) -> str | None:
    # The reference does not check these and its counter panics on them; rejecting them here
    # turns that crash into a configuration error.
    for _, attr in _TOKEN_TOTALS:
        value = getattr(metrics, attr)
        if value is not None and value < 0:
            return f"fake metrics {key_of(attr)} cannot be negative"
    return None


def _check_prefix(metrics: FakeMetrics) -> str | None:
    hits, queries = metrics.prefix_cache_hits, metrics.prefix_cache_queries
    if hits is not None and hits < 0:
        return "fake metrics prefix-cache-hits cannot be negative"
    if queries is not None and queries < 0:
        return "fake metrics prefix-cache-queries cannot be negative"
    if (hits is None) != (queries is None):
        return "fake metrics prefix-cache-hits and prefix-cache-queries must be specified together"
    if hits is not None and queries is not None and hits > queries:
        return "fake metrics prefix-cache-hits cannot exceed prefix-cache-queries"
    return None


_CHECKS: tuple[Callable[[FakeMetrics], str | None], ...] = (
    _check_fixed_gauges,
    _check_generators,
    _check_ttft,
    _check_tpot,
    _check_success,
    _check_plain_arrays,
    _check_totals,
    _check_prefix,
)


def fake_metrics_error(metrics: FakeMetrics) -> str | None:
    """The first failed check, or None; checks run in a fixed order, so an object with several
    problems always reports the same one."""
    for check in _CHECKS:
        if (error := check(metrics)) is not None:
            return error
    return None


def with_all_finish_reasons(metrics: FakeMetrics) -> FakeMetrics:
    """Startup only: a given request-success-total gets the missing reasons at 0."""
    counts = metrics.request_success_total
    if counts is None:
        return metrics
    present = {reason for reason, _ in counts}
    missing = tuple((reason, 0) for reason in FINISH_REASONS if reason not in present)
    return replace(metrics, request_success_total=counts + missing)


def merge_fake_metrics(old: FakeMetrics, update: FakeMetrics) -> FakeMetrics:
    """Apply a partial update: given fields replace, absent/null ones stay.

    The stored result mirrors what /metrics should show afterwards, so the metrics module can
    rebuild from it: a token array given without its total drops the old explicit total (the
    total is then derived from the new array), and request-success-total is replaced whole.
    """
    changes: dict[str, Any] = {
        spec.name: value
        for spec in fields(FakeMetrics)
        if (value := getattr(update, spec.name)) is not None
    }
    for array, total in _TOKEN_TOTALS:
        if array in changes and total not in changes:
            changes[total] = None
    return replace(old, **changes)
