"""A model of several KV cache groups held as vLLM's hybrid KV cache manager holds them: one
shared pool, a sequence taking a block in each full-attention group per token block, a
sliding-window group's blocks only up to its window, a state group's one block."""

from __future__ import annotations

from pathlib import Path

from tests.support.config import load
from vllm_sim.engine.kvcache.cache import BlockCache, BlockCosts
from vllm_sim.server.build import kv_cache_manager
from vllm_sim.server.step_timing import timed_config

GPT_OSS = Path(__file__).parents[2] / "data" / "model_configs" / "gpt-oss-20b"
BS = 16


def test_each_groups_share_of_a_sequence() -> None:
    """gpt-oss: one full group, one sliding group of window 128 (at most
    cdiv(127, 16) + 1 = 9 blocks); a state group adds one block a sequence."""
    costs = BlockCosts(1, ((1, 9),))
    assert [costs.blocks(n) for n in (0, 1, 4, 9, 10, 64)] == [0, 2, 8, 18, 19, 73]
    assert BlockCosts(1, (), 3).blocks(4) == 4 + 3
    assert costs.longest(73) == 64 and costs.longest(72) == 63


def test_a_sliding_window_lets_long_sequences_share_the_pool() -> None:
    """1,000 blocks: 2,048-token sequences take 128 + 9 blocks each, so 7 fit, where two
    full groups would fit 3."""
    sliding = BlockCache(1000, BS)
    sliding.costs = BlockCosts(1, ((1, 9),))
    full = BlockCache(1000, BS)
    full.costs = BlockCosts(2)
    for cache, expected in ((sliding, 7), (full, 3)):
        held = 0
        while cache.fits((), "m", 2048):
            cache.start(held, (), [], "m", None, 2048)
            held += 1
        assert held == expected
        assert cache.max_tokens() == (1000 - 9 if cache is sliding else 500) * BS


def test_the_server_holds_gpt_oss_s_pool_block_for_block() -> None:
    cfg = load(
        *("--model", str(GPT_OSS), "--timing-model", "roofline", "--gpu", "H100"),
        *("--kv-cache-memory-bytes", "2G", "--max-model-len", "4096"),
    )
    cfg, timing = timed_config(cfg, {})
    assert timing is not None and cfg.kv_cache_size == timing.pool_blocks
    manager = kv_cache_manager(cfg, None, timing.model)
    assert manager.cache.costs == BlockCosts(1, ((1, 9),))
    # A 100-token prompt: 7 token blocks in each group.
    assert manager.cache.blocks_for(100) == 14
