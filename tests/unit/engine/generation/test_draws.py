"""One-call uniform draws: inside their ranges, every value reachable, about uniform."""

from __future__ import annotations

import random
from collections import Counter

from vllm_sim.engine.generation.draws import below, between


def test_below_covers_zero_to_n_minus_one_uniformly() -> None:
    rng = random.Random(1)
    counts = Counter(below(rng, 5) for _ in range(50_000))
    assert set(counts) == {0, 1, 2, 3, 4}
    assert all(9_000 < count < 11_000 for count in counts.values())


def test_between_includes_both_ends() -> None:
    rng = random.Random(2)
    seen = {between(rng, 3, 6) for _ in range(2_000)}
    assert seen == {3, 4, 5, 6}
    assert {between(rng, 7, 7) for _ in range(10)} == {7}


def test_the_same_seed_draws_the_same() -> None:
    a, b = random.Random(9), random.Random(9)
    assert [between(a, 1, 100) for _ in range(20)] == [between(b, 1, 100) for _ in range(20)]
