"""The CPU offloading tier (vLLM 0.32's native offloading): its capacity from bytes, blocks
stored as computed, LRU eviction, a lookup going on past the GPU's hit into the CPU, and
the blocks found there loaded back (timed over the host link) rather than computed; its
events with medium CPU, as vLLM's placeholder and self-describing payloads, in vLLM's
array and map encodings."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from tests.unit.engine.test_core import make_engine, run
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.events import BlockRemoved, BlockStored, KvEvent, encode_batch
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.kvcache.offload import (
    HOST_LINK_BYTES_PER_SECOND,
    CpuTier,
    OffloadListener,
    OffloadSpec,
)
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import Sequence

BS = 16
MODEL = "m"
BLOCK_BYTES = 2 * 1024 * 1024  # Llama-3.1-8B's 128 KiB a token, 16 tokens
_uids = iter(range(1, 1_000_000))


def tokens(blocks: int, start: int = 1) -> list[int]:
    """A prompt of `blocks` full blocks and one token more (so each is a hit candidate)."""
    return list(range(start, start + blocks * BS + 1))


class Transfers(OffloadListener):
    def __init__(self) -> None:
        self.loads: list[tuple[int, float]] = []
        self.stores: list[tuple[int, float, int]] = []
        self.failures = 0

    def loaded(self, nbytes: int, seconds: float) -> None:
        self.loads.append((nbytes, seconds))

    def stored(self, nbytes: int, seconds: float, blocks: int) -> None:
        self.stores.append((nbytes, seconds, blocks))

    def store_failed(self) -> None:
        self.failures += 1


def new_cache(
    gpu_blocks: int, cpu_blocks: int, describing: bool = False
) -> tuple[BlockCache, KvCacheManager, list[KvEvent], Transfers]:
    events: list[KvEvent] = []
    cache = BlockCache(gpu_blocks, BS, events.append)
    cache.loaded_models.add(MODEL)
    spec = OffloadSpec(cpu_blocks * BLOCK_BYTES, BLOCK_BYTES, self_describing_events=describing)
    cache.offload = CpuTier(spec, BS)
    transfers = Transfers()
    cache.offload.listener = transfers
    return cache, KvCacheManager(cache, "", 0.0), events, transfers


def run_prompt(cache: BlockCache, kv: KvCacheManager, prompt: list[int]) -> tuple[int, int]:
    """Runs `prompt` to its end; its GPU hit and its CPU-loaded blocks."""
    uid = next(_uids)
    hashes = kv.hashes(prompt, MODEL)
    hit = cache.start(uid, hashes, prompt, MODEL, None, len(prompt))
    loaded = cache.loaded
    cache.finish(uid)
    return hit - loaded, loaded


def cpu(events: list[KvEvent]) -> list[KvEvent]:
    return [e for e in events if getattr(e, "medium", "GPU") == "CPU"]


def test_capacity_is_the_bytes_over_a_page_aligned_block() -> None:
    assert OffloadSpec(10 * BLOCK_BYTES, BLOCK_BYTES).capacity == 10
    assert OffloadSpec(10 * BLOCK_BYTES + BLOCK_BYTES - 1, BLOCK_BYTES).capacity == 10
    # vLLM rounds a chunk up to the page (4096 bytes): 4097-byte blocks take 8192 each.
    assert OffloadSpec(8192 * 3, 4097).capacity == 3
    assert OffloadSpec(1 << 30, 0).capacity == 0
    # The host link: bytes over HOST_LINK_BYTES_PER_SECOND.
    assert OffloadSpec(1, BLOCK_BYTES).seconds(5) == pytest.approx(
        5 * BLOCK_BYTES / HOST_LINK_BYTES_PER_SECOND
    )


def test_blocks_are_stored_as_computed_and_found_after_the_gpu_evicted_them() -> None:
    cache, kv, events, transfers = new_cache(gpu_blocks=7, cpu_blocks=32)
    a, b = tokens(6), tokens(6, start=1000)
    assert run_prompt(cache, kv, a) == (0, 0)
    # Stored on compute: all six full blocks reached the CPU with the prompt's prefill.
    assert len(cache.offload or ()) == 6
    assert transfers.stores == [(6 * BLOCK_BYTES, 6 * BLOCK_BYTES / 50e9, 6)]
    run_prompt(cache, kv, b)  # evicts a's blocks from the 7-block GPU cache
    assert run_prompt(cache, kv, a) == (0, 6)  # all from the CPU, none from the GPU
    nbytes, seconds = transfers.loads[-1]
    assert nbytes == 6 * BLOCK_BYTES and seconds == pytest.approx(6 * BLOCK_BYTES / 50e9)
    # Loaded blocks are the GPU's again: the next run hits them there.
    assert run_prompt(cache, kv, a) == (6, 0)
    stored_cpu = [e for e in cpu(events) if isinstance(e, BlockStored)]
    assert len(stored_cpu) == 12  # a's six, b's six: one event a block, as vLLM


def test_the_lookup_goes_on_past_the_gpu_hit_into_the_cpu() -> None:
    cache, kv, _, _ = new_cache(gpu_blocks=8, cpu_blocks=32)
    long = tokens(6)
    run_prompt(cache, kv, long)
    run_prompt(cache, kv, tokens(7, start=5000))  # the GPU keeps none of `long`
    short = long[: 2 * BS + 1]
    assert run_prompt(cache, kv, short) == (0, 2)  # the first two back on the GPU
    # The GPU has the first two; the CPU the other four.
    assert run_prompt(cache, kv, long) == (2, 4)


def test_lru_evicts_the_least_recently_used_and_a_prompt_tail_first() -> None:
    cache, kv, events, _ = new_cache(gpu_blocks=64, cpu_blocks=6)
    a, b, c = tokens(3), tokens(3, start=1000), tokens(3, start=2000)
    run_prompt(cache, kv, a)
    run_prompt(cache, kv, b)
    tier = cache.offload
    assert tier is not None and len(tier) == 6
    a_keys = [(h, MODEL) for h in kv.hashes(a, MODEL)]
    # Within a prompt the first block is the most recent: a's tail is the oldest.
    assert list(tier.blocks)[:3] == a_keys[::-1]
    run_prompt(cache, kv, a)  # a reused: b is now the least recently used
    events.clear()
    run_prompt(cache, kv, c)
    removed = [e for e in cpu(events) if isinstance(e, BlockRemoved)]
    b_hashes = kv.hashes(b, MODEL)
    assert len(removed) == 1 and set(removed[0].block_hashes) == set(b_hashes)
    assert removed[0].medium == "CPU" and removed[0].group_idx == 0
    assert all(key in tier.blocks for key in a_keys)


def test_a_store_larger_than_the_tier_fails_and_keeps_what_is_there() -> None:
    cache, kv, _, transfers = new_cache(gpu_blocks=64, cpu_blocks=3)
    run_prompt(cache, kv, tokens(2))
    run_prompt(cache, kv, tokens(5, start=1000))
    assert transfers.failures == 1
    tier = cache.offload
    assert tier is not None and len(tier) == 2


def test_placeholder_and_self_describing_payloads() -> None:
    prompt = tokens(2)
    cache, kv, events, _ = new_cache(gpu_blocks=64, cpu_blocks=8)
    run_prompt(cache, kv, prompt)
    hashes = kv.hashes(prompt, MODEL)
    stored = [e for e in cpu(events) if isinstance(e, BlockStored)]
    # vLLM's default: the hash alone (no parent, no tokens, block size 0), group 0.
    assert stored == [BlockStored((h,), None, (), 0, None, None, "CPU", 0) for h in hashes]
    # The GPU's own event comes first and keeps its medium.
    assert isinstance(events[0], BlockStored) and events[0].medium == "GPU"

    cache, kv, events, _ = new_cache(gpu_blocks=64, cpu_blocks=8, describing=True)
    run_prompt(cache, kv, prompt)
    stored = [e for e in cpu(events) if isinstance(e, BlockStored)]
    assert stored == [
        BlockStored((hashes[0],), None, tuple(prompt[:BS]), BS, None, None, "CPU", 0,
                    "full_attention"),
        BlockStored((hashes[1],), hashes[0], tuple(prompt[BS : 2 * BS]), BS, None, None,
                    "CPU", 0, "full_attention"),
    ]  # fmt: skip


def test_cpu_events_encode_as_vllm_does_in_both_forms() -> None:
    placeholder = BlockStored((5,), None, (), 0, None, None, "CPU", 0)
    removed = BlockRemoved((5, 6), "CPU", 0)
    gpu = BlockStored((7,), None, (1, 2), 16)
    maps = msgspec.msgpack.decode(encode_batch(1.0, [placeholder, removed, gpu], 0, True))
    # What vLLM 0.32's msgspec structs encode (tag, required fields, set optional ones).
    assert maps[1][0] == {
        "type": "BlockStored", "block_hashes": [5], "parent_block_hash": None,
        "token_ids": [], "block_size": 0, "lora_id": None, "medium": "CPU",
        "lora_name": None, "group_idx": 0,
    }  # fmt: skip
    assert maps[1][1] == {
        "type": "BlockRemoved",
        "block_hashes": [5, 6],
        "medium": "CPU",
        "group_idx": 0,
    }
    assert maps[1][2]["medium"] == "GPU" and "group_idx" not in maps[1][2]
    arrays = msgspec.msgpack.decode(encode_batch(1.0, [placeholder, removed, gpu], 0, False))
    assert arrays[1][0] == ["BlockStored", [5], 0, [], 0, None, "CPU", None, None, 0]
    assert arrays[1][1] == ["BlockRemoved", [5, 6], "CPU", 0]
    assert arrays[1][2] == ["BlockStored", [7], 0, [1, 2], 16, None, "GPU", None, None]


class Lookups(EngineObserver):
    def __init__(self) -> None:
        self.local: list[tuple[int, int]] = []
        self.offloaded: list[tuple[int, int]] = []

    def prefix_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        self.local.append((queried_tokens, hit_tokens))

    def offloaded_prefix_lookup(self, seq: Sequence, queried_tokens: int, hit_tokens: int) -> None:
        self.offloaded.append((queried_tokens, hit_tokens))


def test_the_engine_waits_for_the_load_and_counts_cpu_hits_as_external() -> None:
    """Under the token clock the load's seconds add to the first token's time; the
    engine reports the CPU's part of the hit apart from the GPU's."""
    cache, kv, _, _ = new_cache(gpu_blocks=8, cpu_blocks=64)
    engine = make_engine(tokens=2, itl_ms=1, ttft_ms=0, max_num_seqs=1, kv=kv)
    lookups = Lookups()
    engine.observer = lookups
    tier = cache.offload
    assert tier is not None

    def req(prompt: list[int]) -> GenerationRequest:
        return GenerationRequest("r", MODEL, [Prompt(prompt)], max_tokens=2)

    a = tokens(6)
    firsts: list[float] = []

    async def scenario() -> None:
        for prompt in (a, tokens(7, start=1000), a):  # the second evicts a from the GPU
            started = engine.scheduler.now()
            stream = engine.submit(req(prompt))
            await stream.wait_done()
            seq = stream.sequences[0]
            assert seq.t_first_token is not None
            firsts.append(seq.t_first_token - started)

    run(scenario)
    load = tier.spec.seconds(6)
    assert lookups.offloaded[-1] == (len(a), 6 * BS)
    assert lookups.local[-1] == (len(a), 0)
    assert load > 0 and firsts[2] == pytest.approx(load, abs=1e-3)
    assert firsts[0] == pytest.approx(0.0, abs=1e-3)


def test_the_grpc_feed_marks_the_tiers_events_host() -> None:
    from vllm_sim.proto import engine_pb2 as pb
    from vllm_sim.transports.grpc.feeds import KvEventFeed

    feed = KvEventFeed(BS)
    for event in (
        BlockStored((5,), None, (), 0, None, None, "CPU", 0),
        BlockRemoved((5,), "CPU", 0),
        BlockStored((7,), None, tuple(range(BS)), BS),
    ):
        feed.add(event)
    stored, removed, gpu = asyncio.run(feed.next()) or []
    assert stored.stored.medium == "CPU" and stored.stored.tier == pb.KV_CACHE_TIER_HOST
    assert [b.block_hash for b in stored.stored.blocks] == [5]
    assert removed.removed.medium == "CPU" and removed.removed.tier == pb.KV_CACHE_TIER_HOST
    assert not gpu.stored.HasField("medium") and not gpu.stored.HasField("tier")


def test_blocks_loaded_back_are_used_and_so_the_most_recent() -> None:
    cache, kv, events, _ = new_cache(gpu_blocks=7, cpu_blocks=9)
    a, b = tokens(3), tokens(6, start=1000)
    run_prompt(cache, kv, a)
    run_prompt(cache, kv, b)  # the GPU loses a; the CPU holds a's 3 and b's 6
    assert run_prompt(cache, kv, a) == (0, 3)
    events.clear()
    run_prompt(cache, kv, tokens(2, start=5000))  # two more: the two least recent go
    removed = [e for e in cpu(events) if isinstance(e, BlockRemoved)]
    b_hashes = kv.hashes(b, MODEL)
    assert len(removed) == 1 and set(removed[0].block_hashes) == set(b_hashes[-2:])
