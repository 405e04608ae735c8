"""Prompt tokens for traces that give lengths rather than text.

A Mooncake request's prompt is its blocks in order: the same block id always stands for
the same 512 tokens, so requests sharing a prefix of ids share that prefix of tokens,
and the engine's prefix cache finds it as a real one would. Tokens past the blocks (and
every token of a trace without blocks) are the request's own, shared with no one.

Ids are pseudo-random from 256 to 31,999 (or below a given vocabulary size), so that a
model's vocabulary holds them (and the same prompts can be sent to a real vLLM as token
ids), and all take three bytes in the
KV block hashes' CBOR: ids of one width are encoded in a few C-level passes, mixed widths
token by token, which costs several times more per prompt.
"""

from __future__ import annotations

import functools
import random
from array import array

from vllm_sim.whatif.trace import MOONCAKE_BLOCK, TraceRequest

VOCABULARY_SPAN = 32_000
SMALLEST_VOCABULARY = 512
# Seeds of a request's own tokens, apart from any block id's.
_OWN_SEED = 1 << 48


@functools.lru_cache(maxsize=16)
def _high_bytes(vocabulary: int) -> bytes:
    """Each id is two random bytes, the high one made 1..top: ids from 1 << 8 to
    (top << 8) + 255, below `vocabulary` (for 32,000: top 124, ids up to 31,999)."""
    top = min(vocabulary, 1 << 16) // 256 - 1
    if top < 1:
        raise ValueError(
            f"a vocabulary of {vocabulary} is too small: at least {SMALLEST_VOCABULARY}"
        )
    return bytes(1 + b % top for b in range(256))


def random_ids(seed: int, count: int, vocabulary: int = VOCABULARY_SPAN) -> list[int]:
    """`count` ids from 256 to below `vocabulary`, the same for the same seed."""
    # Seeded by the number's text: an int seed would count only its absolute value.
    raw = bytearray(random.Random(str(seed)).randbytes(2 * count))
    raw[1::2] = raw[1::2].translate(_high_bytes(vocabulary))
    ids = array("H", raw)
    if ids.itemsize != 2:  # pragma: no cover - "H" is two bytes on every supported platform
        raise RuntimeError("unsigned short is not two bytes here")
    return ids.tolist()


def prompt_ids(index: int, traced: TraceRequest, vocabulary: int = VOCABULARY_SPAN) -> list[int]:
    """The token ids of request `index` (its position in the trace), below `vocabulary`."""
    length = traced.input_length
    ids: list[int] = []
    for block_id in traced.hash_ids:
        if len(ids) >= length:
            break
        ids += random_ids(block_id, MOONCAKE_BLOCK, vocabulary)
    if len(ids) >= length:
        del ids[length:]
        return ids
    ids += random_ids(_OWN_SEED + index, length - len(ids), vocabulary)
    return ids
