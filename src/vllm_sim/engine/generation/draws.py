"""Uniform integer draws for the per-request hot path, from one `random()` call each.

random.Random's randint and choice run in interpreted Python (several calls and a loop
of getrandbits each); from compiled code, one C call and a multiplication do the same.
The bias of flooring a 53-bit float is below 2**-40 for any range the engine draws from.
"""

from __future__ import annotations

import random


def below(rng: random.Random, n: int) -> int:
    """A uniform integer in [0, n), n >= 1."""
    return int(rng.random() * n)


def between(rng: random.Random, low: int, high: int) -> int:
    """A uniform integer in [low, high], both included (low <= high)."""
    return low + int(rng.random() * (high - low + 1))
