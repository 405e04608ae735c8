"""A sequence's KV blocks on the cache: whether its prompt fits, taking its blocks when it
starts or resumes, and how far its tokens may go on the blocks it holds.

As in vLLM, a sequence holds a block per `block_size` tokens of its prompt and of its
output's KV (the KV of output token k exists once token k+1 is being made). Its blocks are
given back by the cache's `finish`, and grown by the scheduler core, which preempts when
they run out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_sim.engine.kvcache.cache import BlockCache, Lora
from vllm_sim.engine.sequence import NO_KV_LIMIT

if TYPE_CHECKING:
    from vllm_sim.engine.sequence import Sequence


def prompt_fits(seq: Sequence, cache: BlockCache) -> bool:
    """Room for its prompt (and the output a preempted sequence recomputes)."""
    return cache.fits(
        seq.prompt.block_hashes, seq.request.model, len(seq.prompt.token_ids) + seq.emitted
    )


def hold_blocks(seq: Sequence, computed: int, cache: BlockCache) -> int:
    """Takes the blocks for `computed` tokens of KV; returns the prompt's cached tokens: its
    hit, whole blocks, which as in vLLM never reaches the last of the `computed` tokens (a
    prompt found whole still computes its last block), and after it, with CPU offloading,
    the blocks loaded back from the CPU (`loaded_tokens`, taking `kv_load` seconds)."""
    request, prompt = seq.request, seq.prompt
    lora = Lora(seq.lora_slot, request.lora) if request.lora else None
    hit = cache.start(seq.uid, prompt.block_hashes, prompt.token_ids, request.model, lora, computed)
    set_kv_limit(seq, cache.blocks_for(computed), computed, len(prompt.token_ids), cache)
    seq.loaded_tokens = cache.loaded * cache.block_size
    seq.kv_load = cache.load_seconds
    return hit * cache.block_size


def set_kv_limit(
    seq: Sequence, blocks: int, tokens: int, prompt_tokens: int, cache: BlockCache
) -> None:
    """Token k+1 needs the KV of the prompt and k output tokens: while `emitted` is below
    the limit, the `blocks` held (sized for `tokens`, so whole token blocks of them) have
    room for it (no limit while the cache sleeps)."""
    seq.kv_blocks = blocks
    size = cache.block_size
    room = -(-tokens // size) * size
    seq.kv_limit = NO_KV_LIMIT if cache.disabled else room - prompt_tokens + 1
