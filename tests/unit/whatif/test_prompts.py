"""Prompt tokens made from a trace's lengths and block ids: a block id always stands for
the same 512 tokens, so shared prefixes of ids are shared prefixes of tokens; the rest of
a prompt is its own; every id is below 32,000 and the length is the trace's."""

from __future__ import annotations

import pytest

from vllm_sim.whatif.prompts import VOCABULARY_SPAN, prompt_ids, random_ids
from vllm_sim.whatif.trace import MOONCAKE_BLOCK, TraceRequest


def traced(input_length: int, hash_ids: tuple[int, ...] = ()) -> TraceRequest:
    return TraceRequest(1, 0.0, input_length, 4, hash_ids)


def test_the_same_block_id_gives_the_same_tokens_anywhere() -> None:
    """Block 42 is the same 512 tokens in any request, at any position of the prompt."""
    block = random_ids(42, MOONCAKE_BLOCK)
    assert random_ids(42, MOONCAKE_BLOCK) == block
    leading = prompt_ids(0, traced(2 * MOONCAKE_BLOCK, (42, 1)))
    trailing = prompt_ids(7, traced(2 * MOONCAKE_BLOCK, (3, 42)))
    assert leading[:MOONCAKE_BLOCK] == block
    assert trailing[MOONCAKE_BLOCK:] == block


def test_prompts_sharing_a_prefix_of_ids_share_that_prefix_of_tokens() -> None:
    """Two requests with ids (5, 6, 7, ...) and (5, 6, 9, ...) agree on their first 1024
    tokens and differ in the third block."""
    first = prompt_ids(0, traced(4 * MOONCAKE_BLOCK, (5, 6, 7, 8)))
    second = prompt_ids(1, traced(3 * MOONCAKE_BLOCK, (5, 6, 9)))
    shared = 2 * MOONCAKE_BLOCK
    assert first[:shared] == second[:shared]
    assert first[shared : shared + MOONCAKE_BLOCK] != second[shared : shared + MOONCAKE_BLOCK]


def test_distinct_block_ids_give_distinct_tokens() -> None:
    """Different non-negative ids are different blocks."""
    blocks = {tuple(random_ids(block, MOONCAKE_BLOCK)) for block in range(50)}
    assert len(blocks) == 50


def test_a_negative_block_id_is_not_the_same_block_as_its_absolute_value() -> None:
    """The trace reader accepts negative hash ids; -3 must not stand for block 3."""
    assert random_ids(-3, MOONCAKE_BLOCK) != random_ids(3, MOONCAKE_BLOCK)


def test_a_prompts_own_tokens_differ_between_requests_and_repeat_for_the_same_one() -> None:
    """Past its blocks (or with none), a prompt's tokens depend on its position in the
    trace: two requests never share them, the same request gets them again."""
    blockless_a = prompt_ids(0, traced(300))
    blockless_b = prompt_ids(1, traced(300))
    assert blockless_a != blockless_b
    assert blockless_a[:16] != blockless_b[:16]
    assert prompt_ids(0, traced(300)) == blockless_a

    tail_a = prompt_ids(3, traced(MOONCAKE_BLOCK + 100, (11,)))[MOONCAKE_BLOCK:]
    tail_b = prompt_ids(4, traced(MOONCAKE_BLOCK + 100, (11,)))[MOONCAKE_BLOCK:]
    assert len(tail_a) == len(tail_b) == 100
    assert tail_a != tail_b
    assert tail_a[:16] != tail_b[:16]


@pytest.mark.parametrize(
    ("length", "hash_ids"),
    [
        (1, ()),
        (777, ()),
        (100, (1, 2, 3)),  # shorter than its first block
        (700, (1, 2)),  # ends inside the second block
        (1024, (1, 2)),  # exactly its blocks
        (1500, (1, 2)),  # blocks then its own tokens
    ],
)
def test_the_prompt_has_exactly_the_traced_length(length: int, hash_ids: tuple[int, ...]) -> None:
    """However the blocks and the length compare, the prompt has `input_length` ids, and
    a partial last block is that block's first tokens."""
    ids = prompt_ids(2, traced(length, hash_ids))
    assert len(ids) == length
    blocks = [token for block in hash_ids for token in random_ids(block, MOONCAKE_BLOCK)]
    covered = min(length, len(blocks))
    assert ids[:covered] == blocks[:covered]


def test_every_id_is_in_every_models_vocabulary() -> None:
    """Ids fall in [0, 32000) and spread over that range."""
    ids = random_ids(123, 200_000) + prompt_ids(9, traced(5000, (4, 5)))
    assert all(isinstance(token, int) for token in ids[:10])
    assert min(ids) >= 0
    assert max(ids) < VOCABULARY_SPAN == 32_000
    assert max(ids) >= 31_900
    assert len(set(ids)) > 30_000
