"""Which cached block the KV cache evicts when it is full: the oldest released one, except
that blocks of models no longer loaded (a LoRA whose slot was taken) go first; a block
taken back into use is no longer a candidate; clear() forgets everything; and eviction
does not walk the cache when no unloaded model has blocks in it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from itertools import count

import pytest

from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.events import AllBlocksCleared, BlockRemoved, KvEvent

BASE = "base-model"
LORA = "adapter"
_uids = count(1)


class Recorder:
    """The events a cache publishes."""

    def __init__(self, cache: BlockCache) -> None:
        self.events: list[KvEvent] = []
        cache.subscribe(self.events.append)

    @property
    def removed(self) -> list[int]:
        return [h for e in self.events if isinstance(e, BlockRemoved) for h in e.block_hashes]


def new_cache(capacity: int) -> tuple[BlockCache, Recorder]:
    """A cache of one-token blocks with the base model and the adapter loaded."""
    cache = BlockCache(capacity, 1)
    cache.loaded_models.update([BASE, LORA])
    return cache, Recorder(cache)


def hold(cache: BlockCache, hashes: Sequence[int], model: str = BASE) -> int:
    """A sequence whose prompt is one full block per hash; its uid."""
    uid = next(_uids)
    cache.start(uid, list(hashes), list(hashes), model, None, len(hashes))
    return uid


def cached(cache: BlockCache, hashes: Sequence[int], model: str = BASE) -> None:
    """Blocks held by a sequence that then finished: cached, unused, released in order."""
    for h in hashes:
        cache.finish(hold(cache, [h], model))


def test_the_oldest_released_block_is_evicted_first() -> None:
    """Blocks are evicted in the order they were released, not the order they were made."""
    cache, recorder = new_cache(3)
    uids = [hold(cache, [h]) for h in (1, 2, 3)]
    for uid in (uids[1], uids[0], uids[2]):  # released: 2, 1, 3
        cache.finish(uid)
    hold(cache, [4])
    assert recorder.removed == [2]
    hold(cache, [5])
    assert recorder.removed == [2, 1]
    assert list(cache.unused) == [(3, BASE)]


def test_a_prompts_tail_is_evicted_before_its_head() -> None:
    """A finished prompt's blocks are released last block first, so its head, the part
    other prompts share, stays cached longest."""
    cache, recorder = new_cache(3)
    cache.finish(hold(cache, [10, 11, 12]))
    hold(cache, [20, 21])
    assert recorder.removed == [12, 11]
    assert list(cache.unused) == [(10, BASE)]


def test_no_block_is_evicted_while_there_is_room() -> None:
    """Cached blocks stay while the cache has free blocks for new ones."""
    cache, recorder = new_cache(4)
    cached(cache, [1, 2])
    hold(cache, [3, 4])
    assert recorder.removed == []
    assert len(cache.unused) == 2


def test_a_block_in_use_is_not_evicted() -> None:
    """A block a running sequence holds is skipped however old: the oldest unused goes."""
    cache, recorder = new_cache(3)
    hold(cache, [1])
    cached(cache, [2, 3])
    hold(cache, [4])
    assert recorder.removed == [2]
    assert (1, BASE) in cache.used


def test_blocks_of_an_unloaded_model_are_evicted_first() -> None:
    """Once the adapter is unloaded its block, the newest released, is evicted before the
    older blocks of the base model; then eviction returns to the oldest."""
    cache, recorder = new_cache(3)
    cached(cache, [1, 2])
    cached(cache, [3], LORA)
    cache.loaded_models.discard(LORA)
    hold(cache, [4])
    assert recorder.removed == [3]
    hold(cache, [5])
    assert recorder.removed == [3, 1]


def test_a_loaded_models_blocks_keep_the_release_order() -> None:
    """While the adapter is loaded its blocks are evicted in release order like any other."""
    cache, recorder = new_cache(3)
    cached(cache, [1, 2])
    cached(cache, [3], LORA)
    hold(cache, [4])
    assert recorder.removed == [1]


def test_the_same_hash_of_two_models_is_two_blocks() -> None:
    """A block is keyed by (hash, model): the unloaded adapter's copy of hash 1 goes, the
    base model's stays."""
    cache, recorder = new_cache(2)
    cached(cache, [1])
    cached(cache, [1], LORA)
    cache.loaded_models.discard(LORA)
    hold(cache, [9])
    assert recorder.removed == [1]
    assert list(cache.unused) == [(1, BASE)]


def test_a_block_taken_back_into_use_is_not_evicted() -> None:
    """A later prompt of the unloaded adapter holding its cached block makes it used:
    eviction falls back to the oldest block; released again, it is the first to go."""
    cache, recorder = new_cache(3)
    cached(cache, [1, 2])
    cached(cache, [3], LORA)
    cache.loaded_models.discard(LORA)
    again = hold(cache, [3], LORA)
    assert (3, LORA) in cache.used and (3, LORA) not in cache.unused
    hold(cache, [4])
    assert recorder.removed == [1]
    cache.finish(again)
    hold(cache, [5])
    assert recorder.removed == [1, 3]


def test_clear_forgets_every_block() -> None:
    """clear() drops held and cached blocks alike with one AllBlocksCleared, frees the whole
    cache and forgets the unloaded model's blocks; afterwards eviction is oldest first
    again, and a sequence that ran across the clear finishes without effect."""
    cache, recorder = new_cache(3)
    running = hold(cache, [1])
    cached(cache, [2], LORA)
    cache.loaded_models.discard(LORA)
    cache.clear()
    assert isinstance(recorder.events[-1], AllBlocksCleared)
    assert not cache.used and not cache.unused and cache._unused_per_model == {}
    assert cache.free_blocks == cache.capacity == 3 and cache.held_blocks == 0
    cache.finish(running)
    assert cache.free_blocks == 3
    cached(cache, [5, 6, 7])
    hold(cache, [8])
    assert recorder.removed == [5]


def test_own_blocks_make_room_too() -> None:
    """Blocks a sequence takes for its own (output, partial prompt) evict cached blocks
    the same way: unloaded model first, then the oldest."""
    cache, recorder = new_cache(4)
    cached(cache, [1, 2, 3])
    cached(cache, [4], LORA)
    cache.loaded_models.discard(LORA)
    cache.take(next(_uids), 2)
    assert recorder.removed == [4, 1]
    assert cache.own_blocks == 2


CACHED = 200_000
EVICTIONS = 20_000


@pytest.mark.parametrize("adapter_block", ["none", "taken back", "cached"])
def test_eviction_does_not_walk_the_cache(adapter_block: str) -> None:
    """20,000 evictions from a cache of 200,000 unused blocks take well under the generous
    bound (walking the cache for each would take minutes), oldest first. Likewise when the
    newest block belonged to the unloaded adapter and a later prompt took it back; when it
    is still cached it is found (once) and evicted first."""
    cache, recorder = new_cache(CACHED + 1)
    cache.finish(hold(cache, range(CACHED)))  # released newest hash first
    if adapter_block != "none":
        cached(cache, [CACHED], LORA)
        cache.loaded_models.discard(LORA)
    if adapter_block == "taken back":
        hold(cache, [CACHED], LORA)
    elif adapter_block == "none":
        hold(cache, [CACHED])  # the cache is full either way
    started = time.perf_counter()
    cache.take(next(_uids), EVICTIONS)
    elapsed = time.perf_counter() - started
    assert elapsed < 5.0, f"{EVICTIONS} evictions took {elapsed:.1f} s"
    oldest = list(range(CACHED - 1, CACHED - 1 - EVICTIONS, -1))
    if adapter_block == "cached":
        assert recorder.removed == [CACHED, *oldest[:-1]]
    else:
        assert recorder.removed == oldest
    assert len(cache.unused) + len(cache.used) + cache.own_blocks == cache.capacity
