"""Response lengths: the reference's histogram buckets, distributions and edge cases."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

import pytest

from vllm_sim.engine.generation import (
    histogram_buckets,
    response_length,
    round_half_away_from_zero,
)

DRAWS = 40_000


@pytest.mark.parametrize(
    ("max_tokens", "expected"),
    [
        (47, [(1, 9), (10, 18), (19, 27), (28, 36), (37, 46)]),
        (50, [(1, 9), (10, 19), (20, 29), (30, 39), (40, 49)]),
        (60, [(1, 11), (12, 23), (24, 35), (36, 47), (48, 59)]),
        (101, [(1, 20), (21, 40), (41, 60), (61, 80), (81, 100)]),
        (102, [(1, 20), (21, 40), (41, 60), (61, 82), (83, 101)]),
        (200, [(1, 20), (21, 40), (41, 60), (61, 180), (181, 199)]),
        (500, [(1, 20), (21, 40), (41, 60), (61, 480), (481, 499)]),
    ],
)
def test_histogram_buckets(max_tokens: int, expected: list[tuple[int, int]]) -> None:
    assert histogram_buckets(max_tokens) == expected


@pytest.mark.parametrize("max_tokens", range(7, 1000))
def test_buckets_tile_one_to_m_minus_one(max_tokens: int) -> None:
    buckets = histogram_buckets(max_tokens)
    assert buckets[0][0] == 1
    assert buckets[-1][1] == max_tokens - 1
    for (_, end), (start, _) in pairwise(buckets):
        assert start == end + 1
    assert all(start <= end for start, end in buckets)


def lengths(seed: int, **kwargs: int | bool | None) -> list[int]:
    rng = random.Random(seed)
    return [response_length(rng, **kwargs) for _ in range(DRAWS)]  # type: ignore[arg-type]


def test_ignore_eos_returns_max_tokens() -> None:
    rng = random.Random(0)
    assert response_length(rng, max_tokens=50, limit=1, ignore_eos=True) == 50


def test_ignore_eos_without_max_tokens_is_rejected() -> None:
    with pytest.raises(ValueError, match="ignore_eos"):
        response_length(random.Random(0), max_tokens=None, limit=100, ignore_eos=True)


@pytest.mark.parametrize("bad", [0, -3])
def test_non_positive_max_tokens_is_rejected(bad: int) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        response_length(random.Random(0), max_tokens=bad, limit=100, ignore_eos=False)


def test_no_room_without_max_tokens_is_rejected() -> None:
    with pytest.raises(ValueError, match="limit"):
        response_length(random.Random(0), max_tokens=None, limit=0, ignore_eos=False)


def test_max_tokens_one_is_always_one() -> None:
    assert set(lengths(1, max_tokens=1, limit=5, ignore_eos=False)) == {1}


@pytest.mark.parametrize("max_tokens", range(2, 7))
def test_small_max_tokens_is_uniform(max_tokens: int) -> None:
    counts = Counter(lengths(2, max_tokens=max_tokens, limit=5, ignore_eos=False))
    assert set(counts) == set(range(1, max_tokens + 1))
    for count in counts.values():
        assert count / DRAWS == pytest.approx(1 / max_tokens, abs=0.015)


@pytest.mark.parametrize("max_tokens", [7, 47, 60, 101, 102, 200, 500])
def test_histogram_distribution(max_tokens: int) -> None:
    values = lengths(3, max_tokens=max_tokens, limit=1, ignore_eos=False)
    assert all(1 <= value <= max_tokens for value in values)
    assert values.count(max_tokens) / DRAWS == pytest.approx(0.15, abs=0.01)
    buckets = histogram_buckets(max_tokens)
    for (start, end), share in zip(buckets, [0.20, 0.30, 0.20, 0.05, 0.10], strict=True):
        in_bucket = sum(start <= value <= end for value in values)
        assert in_bucket / DRAWS == pytest.approx(share, abs=0.012)


def test_histogram_uniform_within_bucket() -> None:
    values = lengths(4, max_tokens=60, limit=1, ignore_eos=False)
    first_bucket = Counter(value for value in values if value <= 11)
    assert set(first_bucket) == set(range(1, 12))
    expected = DRAWS * 0.20 / 11
    assert all(abs(count - expected) < 0.15 * expected for count in first_bucket.values())


@pytest.mark.parametrize("limit", [1, 5, 19])
def test_small_limit_is_uniform(limit: int) -> None:
    counts = Counter(lengths(5, max_tokens=None, limit=limit, ignore_eos=False))
    assert set(counts) == set(range(1, limit + 1))


def test_without_max_tokens_is_normal_around_forty() -> None:
    values = lengths(6, max_tokens=None, limit=10_000, ignore_eos=False)
    assert all(1 <= value <= 10_000 for value in values)
    mean = sum(values) / DRAWS
    # N(40, 20) truncated below at 1: mean 41.2; P(19.5 <= x < 60.5 | x >= 1) = 0.713.
    assert mean == pytest.approx(41.2, abs=0.4)
    assert sum(20 <= value <= 60 for value in values) / DRAWS == pytest.approx(0.713, abs=0.01)


def test_without_max_tokens_respects_limit() -> None:
    values = lengths(7, max_tokens=None, limit=25, ignore_eos=False)
    assert min(values) >= 1
    assert max(values) == 25  # the limit itself is reachable (finish_reason length)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.5, 1), (1.5, 2), (2.5, 3), (2.49, 2), (-0.5, -1), (-2.5, -3), (3.0, 3)],
)
def test_round_half_away_from_zero(value: float, expected: int) -> None:
    assert round_half_away_from_zero(value) == expected


def test_same_seed_same_lengths() -> None:
    for kwargs in (
        {"max_tokens": 200, "limit": 1, "ignore_eos": False},
        {"max_tokens": None, "limit": 4000, "ignore_eos": False},
    ):
        assert lengths(100, **kwargs) == lengths(100, **kwargs)
        assert lengths(100, **kwargs) != lengths(101, **kwargs)
