"""Response length in random mode, drawn from the reference's length histogram."""

from __future__ import annotations

import bisect
import functools
import math
import random
from typing import Final

from vllm_sim.engine.generation.draws import between

# Cumulative probabilities of the five histogram buckets; above the last one the
# response is exactly max_tokens (15% of requests).
_CUMULATIVE: Final = (0.20, 0.50, 0.70, 0.75, 0.85)
_UNIFORM_MAX_TOKENS: Final = 6  # M <= 6: plain uniform draw in [1, M]
_EQUAL_BUCKETS_MAX_TOKENS: Final = 101  # M <= 101: five equal-width buckets
_FIXED_BUCKETS: Final = ((1, 20), (21, 40), (41, 60))  # M > 101: first three buckets
_NORMAL_MIN_LIMIT: Final = 20  # below this, no max_tokens -> uniform in [1, limit]
_NORMAL_MEAN: Final = 40.0
_NORMAL_STD: Final = 20.0


def response_length(
    rng: random.Random, *, max_tokens: int | None, limit: int, ignore_eos: bool
) -> int:
    """Number of tokens to generate.

    `limit` (max-model-len minus prompt tokens) is only used when `max_tokens` is None.
    Raises ValueError for inputs the API layer must reject first: `ignore_eos` without
    `max_tokens`, `max_tokens` < 1, or (without `max_tokens`) `limit` < 1.
    """
    if max_tokens is None:
        if ignore_eos:
            raise ValueError("ignore_eos requires max_tokens")
        return _length_without_max(rng, limit)
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if ignore_eos:
        return max_tokens
    return _length_from_histogram(rng, max_tokens)


@functools.lru_cache(maxsize=4096)
def _bucket_table(max_tokens: int) -> tuple[tuple[int, int], ...]:
    # Clients send a handful of distinct max_tokens values: compute each layout once.
    return tuple(histogram_buckets(max_tokens))


def histogram_buckets(max_tokens: int) -> list[tuple[int, int]]:
    """The five inclusive [start, end] ranges used for `max_tokens` > 6.

    Integer arithmetic gives floor((M-1)*b/5) exactly; it equals the reference's float
    computation for every M <= 101, and never reaches M, so the `end >= M -> M-1` cap
    only matters for the M > 101 layout.
    """
    if max_tokens <= _EQUAL_BUCKETS_MAX_TOKENS:
        span = max_tokens - 1
        return [((span * b) // 5 + 1, (span * (b + 1)) // 5) for b in range(5)]
    return [
        *_FIXED_BUCKETS,
        (61, max_tokens - 20),
        (max_tokens - 19, max_tokens - 1),
    ]


def round_half_away_from_zero(value: float) -> int:
    """Go's math.Round semantics (Python's round() rounds half to even)."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def _length_from_histogram(rng: random.Random, max_tokens: int) -> int:
    if max_tokens <= 1:
        return max_tokens
    if max_tokens <= _UNIFORM_MAX_TOKENS:
        return between(rng, 1, max_tokens)
    draw = rng.random()
    if draw > _CUMULATIVE[-1]:
        return max_tokens
    start, end = _bucket_table(max_tokens)[bisect.bisect_left(_CUMULATIVE, draw)]
    return between(rng, start, end)


def _length_without_max(rng: random.Random, limit: int) -> int:
    if limit < 1:
        raise ValueError(f"no room left in the context window (limit {limit})")
    if limit < _NORMAL_MIN_LIMIT:
        return between(rng, 1, limit)
    # Rejection sampling: with limit >= 20 at least ~83% of draws are accepted.
    while True:
        value = rng.gauss(_NORMAL_MEAN, _NORMAL_STD)
        if 1 <= value <= limit:
            return round_half_away_from_zero(value)
