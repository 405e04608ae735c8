"""How many tool calls a response makes and which tools they call; their arguments come
from `vllm_sim.schemagen`."""

from __future__ import annotations

import random
from collections.abc import Sequence

from vllm_sim.schemagen import SynthesisSettings


def call_count(
    rng: random.Random, candidates: int, forced: bool, settings: SynthesisSettings
) -> int:
    """How many tool calls: 1 when forced (`required` or a named tool) else 0, plus one per
    successful extra-call draw while fewer than `candidates`."""
    if candidates < 1:
        raise ValueError("no tools available to create tool calls")
    count = 1 if forced else 0
    while count < candidates and rng.random() < settings.extra_call_probability / 100:
        count += 1
    return count


def pick_tools(rng: random.Random, names: Sequence[str], count: int) -> list[str]:
    """`count` tool names, uniform with replacement; a single candidate consumes no draw."""
    if not names:
        raise ValueError("no tools available to create tool calls")
    if len(names) == 1:
        return [names[0]] * count
    return [rng.choice(names) for _ in range(count)]
