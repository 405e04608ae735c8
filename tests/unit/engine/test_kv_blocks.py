"""A sequence's KV blocks on the cache: whether its prompt fits, what it takes, and how far
its tokens may go on what it holds."""

from __future__ import annotations

import random

from tests.support.content import FixedContent
from tests.unit.engine.test_core import request
from vllm_sim.engine.kv_blocks import hold_blocks, prompt_fits, set_kv_limit
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.latency import LatencyModel, LatencySettings
from vllm_sim.engine.sequence import NO_KV_LIMIT, RequestStream, Sequence

BS = 4
_uids = iter(range(1, 1_000_000))


def sequence(prompt_tokens: int, emitted: int = 0) -> Sequence:
    req = request(prompt_tokens=prompt_tokens)
    req.prompts[0].token_ids = list(range(prompt_tokens))
    latency = LatencyModel(LatencySettings(), random.Random(0))
    seq = Sequence(next(_uids), req, RequestStream(req), 0, 0, 0.0, latency)
    FixedContent(8).generate(seq, 1024)
    seq.emitted = emitted
    return seq


def test_a_prompt_fits_while_the_cache_has_its_blocks() -> None:
    cache = BlockCache(4, BS)
    assert prompt_fits(sequence(16), cache)
    assert not prompt_fits(sequence(17), cache)
    assert not prompt_fits(sequence(13, emitted=4), cache)  # a preempted one recomputes output


def test_holding_blocks_sets_how_far_tokens_may_go() -> None:
    cache = BlockCache(64, BS)
    seq = sequence(6)
    assert hold_blocks(seq, 6, cache) == 0  # nothing cached yet
    assert seq.kv_blocks == 2 == cache.held_blocks
    # Token k+1 needs the KV of 6 + k tokens: 2 blocks hold it up to k = 2.
    assert seq.kv_limit == 2 * BS - 6 + 1


def test_a_sleeping_cache_sets_no_limit() -> None:
    cache = BlockCache(64, BS)
    cache.disabled = True
    seq = sequence(6)
    set_kv_limit(seq, 2, 2 * BS, 6, cache)
    assert seq.kv_blocks == 2 and seq.kv_limit == NO_KV_LIMIT
