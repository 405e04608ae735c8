"""Percentiles of latency samples (nearest rank), in milliseconds."""

from __future__ import annotations

import math

from bench.spec import Percentiles

EMPTY = Percentiles(0, 0.0, 0.0, 0.0, 0.0)


def percentiles(samples: list[float]) -> Percentiles:
    """p50/p90/p99/max and the mean of samples given in seconds, reported in milliseconds."""
    if not samples:
        return EMPTY
    ordered = sorted(samples)
    n = len(ordered)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * n) - 1)] * 1000.0

    mean = sum(ordered) / n * 1000.0
    return Percentiles(n, rank(0.50), rank(0.90), rank(0.99), ordered[-1] * 1000.0, mean)


def fraction_below(samples: list[float], limit: float) -> float:
    if not samples:
        return 0.0
    return sum(1 for s in samples if s < limit) / len(samples)
