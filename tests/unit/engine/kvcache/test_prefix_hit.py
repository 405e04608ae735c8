"""The prefix-cache hit as vLLM counts it: the longest run of leading full blocks cached,
capped so that at least the last token is computed (vLLM V1's `get_computed_blocks` looks
for at most `num_tokens - 1` tokens, in whole blocks). A prompt found whole therefore
computes its last full block again, and stores it again (one BlockStored, as vLLM's
`cache_full_blocks` reports every block a request computes).

The cap is applied where the hit is found (`BlockCache.start`), so the sequence's
`cached_tokens`, the prefix-cache counters, the usage object and the what-if replay all
read the same number; these tests pin it at the cache and at the engine.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.engine.test_core import make_engine, run
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.events import BlockRemoved, BlockStored, KvEvent
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.frontend.usage import usage_of

BS = 16
MODEL = "m"
_uids = iter(range(1, 1_000_000))


def tokens(count: int, start: int = 1) -> list[int]:
    return list(range(start, start + count))


def new_cache(capacity: int = 64) -> tuple[BlockCache, KvCacheManager, list[KvEvent]]:
    events: list[KvEvent] = []
    cache = BlockCache(capacity, BS, events.append)
    cache.loaded_models.add(MODEL)
    return cache, KvCacheManager(cache, "", 0.0), events


def start(
    cache: BlockCache, kv: KvCacheManager, prompt: list[int], computed: int = 0
) -> tuple[int, int]:
    """Starts a sequence of `prompt` (and `computed` tokens of KV, the prompt's by default);
    its uid and its hit in blocks."""
    uid = next(_uids)
    hashes = kv.hashes(prompt, MODEL)
    return uid, cache.start(uid, hashes, prompt, MODEL, None, computed or len(prompt))


def hit_tokens(cache: BlockCache, kv: KvCacheManager, prompt: list[int]) -> int:
    """Runs `prompt` to its end; its cached tokens."""
    uid, hit = start(cache, kv, prompt)
    cache.finish(uid)
    return hit * BS


@pytest.mark.parametrize(
    ("length", "cached"),
    [
        (48, 32),  # the example: 3 full blocks, the last one computed again
        (50, 48),  # 3 full blocks and 2 tokens: the last token is not in a full block
        (16, 0),  # one block, found whole: nothing is left to count
        (15, 0),  # shorter than a block: never hashed
        (17, 16),
        (1, 0),
        (64, 48),
        (65, 64),
    ],
)
def test_a_repeated_prompt_hits_all_but_its_last_token_in_whole_blocks(
    length: int, cached: int
) -> None:
    cache, kv, _ = new_cache()
    prompt = tokens(length)
    assert hit_tokens(cache, kv, prompt) == 0
    assert hit_tokens(cache, kv, prompt) == cached
    assert hit_tokens(cache, kv, prompt) == cached  # the same every time
    assert cache.hit_limit(length) * BS >= cached


def test_a_prompt_sharing_only_a_prefix_hits_that_prefix() -> None:
    cache, kv, _ = new_cache()
    first = tokens(48)
    assert hit_tokens(cache, kv, first) == 0
    # The first two blocks, then different tokens: the two blocks hit.
    assert hit_tokens(cache, kv, first[:32] + tokens(20, 1000)) == 32
    # A change inside the third block: still the first two.
    assert hit_tokens(cache, kv, first[:40] + tokens(24, 2000)) == 32
    # The whole of `first` and more: its three blocks hit, the cap is past them.
    assert hit_tokens(cache, kv, first + tokens(16, 3000)) == 48
    # A change in the first block: nothing, whatever follows.
    assert hit_tokens(cache, kv, [0, *first[1:]]) == 0


def test_a_prompt_found_whole_stores_its_last_block_again_and_nothing_else() -> None:
    cache, kv, events = new_cache()
    prompt = tokens(48)
    hashes = list(kv.hashes(prompt, MODEL))
    hit_tokens(cache, kv, prompt)
    assert events == [BlockStored(tuple(hashes), None, tuple(prompt), BS, None, None)]
    events.clear()
    assert hit_tokens(cache, kv, prompt) == 32
    # The two blocks it found are not stored again; the third, computed, is.
    assert events == [BlockStored((hashes[2],), hashes[1], tuple(prompt[32:]), BS, None, None)]
    events.clear()
    assert hit_tokens(cache, kv, tokens(50)) == 48  # all of 50's full blocks hit: none stored
    assert events == []
    # The recomputed block took the cached one's place: the cache holds three blocks.
    assert len(cache.unused) == 3 and not cache.used and cache.own_blocks == 0


def test_a_block_others_hold_is_recomputed_into_a_block_of_its_own() -> None:
    """As in vLLM, where the recomputed block is a new one beside the cached one."""
    cache, kv, events = new_cache(8)
    prompt = tokens(48)
    hashes = kv.hashes(prompt, MODEL)
    first, _ = start(cache, kv, prompt)
    assert cache.held_blocks == 3
    # Another copy needs one block: its first two are shared.
    assert cache.blocks_needed(hashes, MODEL, 48) == 1
    second, hit = start(cache, kv, prompt)
    assert hit == 2
    assert cache.held_blocks == 4 and cache.usage == 4 / 8
    assert isinstance(events[-1], BlockStored) and events[-1].block_hashes == (hashes[2],)
    cache.finish(second)
    assert cache.held_blocks == 3
    cache.finish(first)
    assert cache.held_blocks == 0 and len(cache.unused) == 3 and cache.own_blocks == 0
    assert hit_tokens(cache, kv, prompt) == 32


def test_admission_counts_the_recomputed_block() -> None:
    """A cache with room for the shared blocks alone does not fit a copy of a prompt found
    whole: its last block needs a block of its own."""
    cache, kv, _ = new_cache(4)
    prompt = tokens(48)
    hashes = kv.hashes(prompt, MODEL)
    first, _ = start(cache, kv, prompt)
    cache.take(first, 1)  # the first copy's output block: the cache is full
    assert cache.free_blocks == 0 and cache.blocks_needed(hashes, MODEL, 48) == 1
    assert not cache.fits(hashes, MODEL, 48)
    cache.finish(first)
    assert cache.fits(hashes, MODEL, 48)


def test_a_recomputed_block_takes_the_place_of_its_idle_cached_copy() -> None:
    """In vLLM the recomputed block is a new one, and the idle cached one stays free: the
    count of blocks held is the same as taking the cached one back, which evicts nothing."""
    cache, kv, events = new_cache(4)
    prompt = tokens(48)
    hashes = kv.hashes(prompt, MODEL)
    holder, _ = start(cache, kv, prompt)
    other, _ = start(cache, kv, tokens(16, 500))  # the fourth block: the cache is full
    cache.finish(holder)  # three idle blocks
    events.clear()
    again, hit = start(cache, kv, prompt)
    assert hit == 2 and cache.held_blocks == 4
    assert events == [BlockStored((hashes[2],), hashes[1], tuple(prompt[32:]), BS, None, None)]
    cache.finish(again)
    cache.finish(other)
    assert set(hashes) <= {h for h, _ in cache.unused}
    assert not any(isinstance(e, BlockRemoved) for e in events)


def test_a_preempted_sequence_recomputed_hits_its_whole_prompt() -> None:
    """The cap is on the tokens to compute: a preempted sequence recomputes its output too,
    so every full block of its prompt may hit."""
    cache, kv, _ = new_cache()
    prompt = tokens(48)
    hit_tokens(cache, kv, prompt)
    assert start(cache, kv, prompt, computed=48 + 5)[1] == 3
    assert start(cache, kv, prompt, computed=48)[1] == 2  # preempted before a token: capped


# ----------------------------------------------------------------- on the engine


class Lookups(EngineObserver):
    """The prefix-cache counters' inputs: (queried tokens, hit tokens) per lookup."""

    def __init__(self) -> None:
        self.lookups: list[tuple[int, int]] = []

    def prefix_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        self.lookups.append((queried_tokens, hit_tokens))


def _request(prompt: list[int]) -> GenerationRequest:
    return GenerationRequest(request_id=f"r{next(_uids)}", model=MODEL, prompts=[Prompt(prompt)])


def test_the_engine_reports_the_capped_hit_everywhere() -> None:
    """seq.cached_tokens, the counters' lookups and the usage object agree."""

    async def scenario() -> None:
        cache = BlockCache(64, BS)
        cache.loaded_models.add(MODEL)
        engine = make_engine(tokens=2, itl_ms=1, kv=KvCacheManager(cache, "", 0.0))
        lookups = Lookups()
        engine.observer = lookups
        prompts = [tokens(48), tokens(48), tokens(50, 100), tokens(50, 100), tokens(16, 200)]
        prompts += [tokens(16, 200), tokens(32) + tokens(20, 300)]
        reported = []
        for prompt in prompts:
            stream = engine.submit(_request(prompt))
            await stream.wait_done()
            seq = stream.sequences[0]
            usage = usage_of(stream.sequences)
            assert usage.cached_tokens == seq.cached_tokens
            reported.append(seq.cached_tokens)
            await asyncio.sleep(0)
        assert reported == [0, 32, 0, 48, 0, 0, 32]
        assert lookups.lookups == [(len(p), c) for p, c in zip(prompts, reported, strict=True)]

    run(scenario)
