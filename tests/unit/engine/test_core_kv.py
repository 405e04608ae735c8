"""KV block accounting and recompute preemption, on the engine in virtual time.

A sequence holds a block per `block_size` tokens of its prompt and of its output's KV (the
KV of output token k exists once token k+1 is being made), as in vLLM. When a running
sequence needs a block and none is free, the newest running sequence is preempted: its
blocks are freed, it waits at the head of the queue and is recomputed when it runs again.
"""

from __future__ import annotations

import asyncio
from itertools import count

from tests.unit.engine.test_core import make_engine, request, run
from vllm_sim.engine.core import Engine
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest
from vllm_sim.engine.sequence import Sequence

BS = 4
_fills = count(100)


def own(prompt_tokens: int) -> GenerationRequest:
    """A request whose prompt shares no block with any other."""
    req = request(prompt_tokens=prompt_tokens)
    req.prompts[0].token_ids = [next(_fills)] * prompt_tokens
    return req


class Preemptions(EngineObserver):
    def __init__(self) -> None:
        self.preempted: list[int] = []

    def sequence_preempted(self, seq: Sequence) -> None:
        self.preempted.append(seq.uid)


def kv_engine(
    blocks: int,
    *,
    tokens: int,
    itl_ms: int = 10,
    ttft_ms: int = 0,
    seqs: int = 4,
    prefix: bool = True,
) -> tuple[Engine, BlockCache, Preemptions]:
    cache = BlockCache(blocks, BS)
    kv = KvCacheManager(cache, "", 0.0, prefix_caching=prefix)
    engine = make_engine(tokens=tokens, itl_ms=itl_ms, ttft_ms=ttft_ms, max_num_seqs=seqs, kv=kv)
    observer = Preemptions()
    engine.observer = observer
    return engine, cache, observer


def test_blocks_follow_the_prompt_and_the_output_and_are_freed_at_the_end() -> None:
    async def scenario() -> None:
        engine, cache, _ = kv_engine(64, tokens=10)
        stream = engine.submit(request(prompt_tokens=6))  # a full block and a partial one
        seq = stream.sequences[0]
        held: list[tuple[int, int]] = []
        while not stream.done:
            held.append((seq.emitted, cache.held_blocks))
            await stream.wait()
            seq.sent = seq.emitted
        # Token k + 1 needs the KV of the prompt and k output tokens: ceil((6 + k) / 4).
        assert all(blocks == -(-(6 + max(k - 1, 0)) // BS) for k, blocks in held[1:]), held
        assert max(blocks for _, blocks in held) == 4  # 6 + 9 tokens of KV
        assert cache.held_blocks == 0 and cache.usage == 0.0
        assert len(cache.unused) == 1  # the prompt's one full block stays cached

    run(scenario)


def test_usage_counts_every_running_sequence() -> None:
    async def scenario() -> None:
        engine, cache, _ = kv_engine(64, tokens=5)
        streams = [engine.submit(request(prompt_tokens=8 + i)) for i in range(3)]
        await asyncio.sleep(0)
        # Prompts of 8, 9 and 10 tokens: the first two share their first two blocks.
        assert cache.held_blocks == 2 + 1 + 1  # the shared pair, then each one's own partial
        for stream in streams:
            await stream.wait_done()
        assert cache.held_blocks == 0

    run(scenario)


def test_the_newest_running_sequence_is_preempted_and_recomputed() -> None:
    async def scenario() -> None:
        # Two sequences of 4 + 11 tokens of KV need 4 blocks each; the cache holds 6.
        engine, cache, observer = kv_engine(6, tokens=12)
        older = engine.submit(own(4))
        await asyncio.sleep(0.001)
        newer = engine.submit(own(4))
        first, second = older.sequences[0], newer.sequences[0]
        await older.wait_done()
        await newer.wait_done()
        assert observer.preempted and set(observer.preempted) == {second.uid}
        assert first.preemptions == 0 and second.preemptions == len(observer.preempted)
        for seq in (first, second):
            assert seq.finished and seq.finish_reason is Finish.LENGTH
            assert seq.emitted == len(seq.output_ids) == 12
        assert engine.num_running == engine.num_waiting == 0
        assert cache.held_blocks == 0

    run(scenario)


def test_a_preempted_sequence_waits_at_the_head_of_the_queue() -> None:
    async def scenario() -> None:
        engine, _cache, _ = kv_engine(6, tokens=12, seqs=2)
        older = engine.submit(own(4))
        await asyncio.sleep(0.001)
        newer = engine.submit(own(4))
        queued = engine.submit(own(4))  # no slot: it waits
        while not newer.sequences[0].preemptions:
            await asyncio.sleep(0.005)
        # The preempted one is ahead of the one that was already waiting.
        assert engine._queue[0] is newer.sequences[0]
        assert engine.num_waiting == 2
        for stream in (older, newer, queued):
            await stream.wait_done()
            assert stream.sequences[0].emitted == 12
        assert newer.sequences[0].t_finished is not None
        assert queued.sequences[0].t_started is not None
        assert newer.sequences[0].t_finished <= queued.sequences[0].t_finished  # type: ignore[operator]

    run(scenario)


def test_a_sequence_preempted_in_its_prefill_starts_over() -> None:
    async def scenario() -> None:
        # The older one fills the cache while the newer one still waits for its TTFT.
        engine, _cache, observer = kv_engine(4, tokens=12, ttft_ms=100, itl_ms=1)
        older = engine.submit(own(4))
        await asyncio.sleep(0.050)
        newer = engine.submit(own(4))
        seq = newer.sequences[0]
        await older.wait_done()
        assert seq.preemptions == 1 and seq.emitted == 0 and seq.t_first_token is None
        await newer.wait_done()
        assert seq.emitted == 12 and observer.preempted == [seq.uid]

    run(scenario)


def test_a_sequence_alone_ends_at_the_length_the_cache_holds() -> None:
    async def scenario() -> None:
        engine, cache, observer = kv_engine(3, tokens=20)  # 12 tokens of KV at most
        stream = engine.submit(request(prompt_tokens=4))
        await stream.wait_done()
        seq = stream.sequences[0]
        # Token 9 needs 4 + 8 = 12 tokens of KV; token 10 would need a fourth block.
        assert seq.emitted == len(seq.output_ids) == 9
        assert seq.finish_reason is Finish.LENGTH
        assert observer.preempted == [] and cache.held_blocks == 0

    run(scenario)


def test_admission_waits_for_the_blocks_of_a_prompt() -> None:
    async def scenario() -> None:
        engine, _cache, _ = kv_engine(4, tokens=6)
        first = engine.submit(own(7))  # 2 blocks, 3 as it decodes
        second = engine.submit(own(11))  # 3 blocks: only after the first
        await asyncio.sleep(0)
        assert engine.num_running == 1 and engine.num_waiting == 1
        await first.wait_done()
        await second.wait_done()
        assert second.sequences[0].emitted == 6

    run(scenario)


def test_without_prefix_caching_blocks_are_counted_but_never_shared() -> None:
    async def scenario() -> None:
        engine, cache, _ = kv_engine(64, tokens=3, prefix=False)
        streams = [engine.submit(request(prompt_tokens=8)) for _ in range(2)]
        await asyncio.sleep(0)
        assert cache.held_blocks == 4 and not cache.used  # two blocks each, none shared
        for stream in streams:
            await stream.wait_done()
        again = engine.submit(request(prompt_tokens=8))
        await again.wait_done()
        assert again.sequences[0].cached_tokens == 0
        assert cache.held_blocks == 0 and not cache.unused

    run(scenario)


def test_an_aborted_preempted_sequence_leaves_nothing_behind() -> None:
    async def scenario() -> None:
        engine, cache, _ = kv_engine(6, tokens=12)
        older = engine.submit(own(4))
        await asyncio.sleep(0.001)
        newer = engine.submit(own(4))
        while not newer.sequences[0].preemptions:
            await asyncio.sleep(0.005)
        newer.abort()
        assert engine.num_waiting == 0
        await older.wait_done()
        assert engine.num_running == 0 and cache.held_blocks == 0

    run(scenario)
