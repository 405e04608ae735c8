"""Client patterns are parsed and compiled to automata once, within a memory budget.

The estimate the cache is bounded with is checked against tracemalloc's count of what the
worst patterns (the most tree per character, the most automaton states) keep alive.
"""

from __future__ import annotations

import functools
import gc
import random
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from vllm_sim.schemagen import SynthesisError, SynthesisSettings, synthesize
from vllm_sim.schemagen import pattern as pattern_module
from vllm_sim.schemagen.limits import MAX_PATTERN_LENGTH, MAX_PATTERN_STATES
from vllm_sim.schemagen.lru import SizedLru
from vllm_sim.schemagen.pattern import pattern_search

SLACK = 64 * 1024  # the OrderedDict's own table, interpreter free lists


def worst_patterns(index: int) -> Iterator[str]:
    """Distinct patterns of the largest kinds, each within `MAX_PATTERN_LENGTH`."""
    tag = f"{index:05d}"
    room = MAX_PATTERN_LENGTH - len(tag)
    yield tag + "\\W" * (room // 2)  # five ranges per two characters: the largest tree
    yield tag + "".join(chr(0x4E00 + index * 7 + j) for j in range(room))  # int objects
    yield tag + "(?:a?){4990}"  # close to MAX_PATTERN_STATES states
    yield tag + "(?:ab|c[d-f]){1400}"
    yield tag + "." * room


def live_bytes(action: Callable[[], object]) -> int:
    """What `action` leaves allocated, by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> SizedLru[str, object]:
    """A fresh cache of 1 MiB in place of the module's one (8 MiB would take longer)."""
    fresh: SizedLru[str, object] = SizedLru(1024 * 1024)
    monkeypatch.setattr(pattern_module, "_CACHE", fresh)
    return fresh


def test_each_worst_pattern_is_estimated_above_its_memory(cache: SizedLru[str, object]) -> None:
    for pattern in worst_patterns(0):
        cache.clear()
        measured = live_bytes(functools.partial(pattern_search, pattern, "xyz"))
        assert len(cache) == 1
        assert measured <= cache.estimated_bytes, pattern[:20]


def test_the_largest_automaton_is_cached_within_the_state_limit() -> None:
    compiled = pattern_module._compiled("(?:a?){4999}")
    assert compiled.automaton is not None
    assert MAX_PATTERN_STATES - 2 <= len(compiled.automaton.kind) <= MAX_PATTERN_STATES


def test_pattern_cache_memory_stays_within_its_budget(cache: SizedLru[str, object]) -> None:
    def fill() -> None:
        for index in range(3):  # about seven budgets' worth of the largest entries
            for pattern in worst_patterns(index):
                assert pattern_search(pattern, "xyz") in (True, False)

    measured = live_bytes(fill)
    assert measured <= cache.max_bytes + SLACK, measured
    assert cache.estimated_bytes <= cache.max_bytes
    assert measured > cache.max_bytes // 3  # the estimate is not so loose as to bound nothing


def test_pattern_cache_keeps_recent_patterns(cache: SizedLru[str, object]) -> None:
    pattern_search("^a+$", "aa")
    compiled = pattern_module._compiled("^a+$")
    for index in range(2000):
        pattern_search(f"^x{index}$", "x")
        assert pattern_module._compiled("^a+$") is compiled  # used: stays cached
    assert cache.estimated_bytes <= cache.max_bytes


def test_sized_lru_evicts_least_recently_used_first() -> None:
    lru: SizedLru[str, int] = SizedLru(30)
    lru.put("a", 1, 10)
    lru.put("b", 2, 10)
    lru.put("c", 3, 10)
    assert lru.get("a") == 1  # now the most recent
    lru.put("d", 4, 10)  # evicts b
    assert lru.get("b") is None
    assert [lru.get(key) for key in "acd"] == [1, 3, 4]
    lru.put("huge", 5, 31)  # larger than the whole budget: not kept, nothing evicted
    assert lru.get("huge") is None and len(lru) == 3
    lru.put("a", 6, 20)  # replaced: its old size no longer counts
    assert lru.estimated_bytes <= 30 and lru.get("a") == 6


def test_patterns_over_the_length_limit_are_refused_or_not_checked() -> None:
    long_pattern = "a" * (MAX_PATTERN_LENGTH + 1)
    assert pattern_search(long_pattern, "b")  # not checked: counts as matching
    schema = {"type": "string", "pattern": long_pattern}
    with pytest.raises(SynthesisError, match=f"limit of {MAX_PATTERN_LENGTH} characters"):
        synthesize(random.Random(0), schema, SynthesisSettings())
    # An enum value is kept when the pattern cannot be checked, as for other such patterns.
    enum_schema = {"type": "string", "pattern": long_pattern, "enum": ["b"]}
    assert synthesize(random.Random(0), enum_schema, SynthesisSettings()) == "b"
    at_limit = {"type": "string", "pattern": "^" + "a" * (MAX_PATTERN_LENGTH - 2) + "$"}
    value = synthesize(random.Random(0), at_limit, SynthesisSettings())
    assert value == "a" * (MAX_PATTERN_LENGTH - 2)
