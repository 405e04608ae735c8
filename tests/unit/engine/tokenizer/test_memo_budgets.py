"""The tokenizer's client-reachable caches stay within their byte budgets, as measured.

tracemalloc counts what the caches keep alive after being filled with many distinct
pieces and texts (ASCII, Latin-1, CJK and astral characters, short and long), so the
estimates the budgets are enforced with are checked against the real allocations.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable, Iterator

from vllm_sim.engine.tokenizer import PieceVocabulary, SimulatedTokenizer

# What the per-entry estimates leave out: the empty dicts, the first block of the eviction
# deque, and the interpreter's free lists of lists and tuples, which tracemalloc counts.
SLACK = 64 * 1024
# Characters of each string width: ASCII, Latin-1, 2 bytes (CJK), 4 bytes (emoji).
ALPHABETS = ("abcxyz", "éñüß", "中文字符", "\U0001f600\U0001f680\U0001f914")


def piece(rng: random.Random, index: int) -> str:
    """A distinct piece: a word or one other character, then 0..300 spaces."""
    head = rng.choice(ALPHABETS)
    spaces = " " * rng.choice((0, 1, 3, 30, 300))
    if head == "abcxyz":
        return f"w{index}{spaces}"
    return f"{rng.choice(head)}{index}{spaces}"


def text(rng: random.Random, index: int) -> str:
    """A distinct text of 1..4096 characters, mostly one token per character."""
    length = rng.choice((1, 10, 200, 1000, 4096))
    alphabet = rng.choice(ALPHABETS)
    return f"{index} " + "".join(rng.choice(alphabet) for _ in range(length))


def measured(fill: Callable[[], Iterator[object]]) -> list[int]:
    """tracemalloc's count of live bytes after each step of `fill`, from its start. (Not
    the peak: tokenizing a long text briefly holds its pieces, which no cache keeps.)"""
    gc.collect()
    tracemalloc.start()
    try:
        return [tracemalloc.get_traced_memory()[0] for _ in fill()]
    finally:
        tracemalloc.stop()


def test_vocabulary_memory_stays_within_its_budget() -> None:
    budget = 1024 * 1024
    vocab = PieceVocabulary(max_bytes=budget)
    rng = random.Random(3)

    def fill() -> Iterator[object]:
        for index in range(12_000):  # about four budgets' worth: several rotations
            vocab.id_of(piece(rng, index))
            if index % 100 == 99:
                yield None

    samples = measured(fill)
    assert max(samples) <= budget + SLACK, max(samples)
    assert samples[-1] > budget // 3  # the estimate is not so loose that it bounds nothing
    assert vocab.estimated_bytes <= budget
    assert len(vocab) > 1000


def test_prompt_memo_memory_stays_within_its_budget() -> None:
    # With a vocabulary too small to keep any piece, the memo alone keeps the ids alive.
    budget = 1024 * 1024
    tok = SimulatedTokenizer(vocabulary_bytes=0, memo_bytes=budget)
    rng = random.Random(4)

    def fill() -> Iterator[object]:
        for index in range(120):  # about five budgets' worth
            tok.encode(text(rng, index))
            yield None

    samples = measured(fill)
    assert tok.vocabulary_size == 0
    assert max(samples) <= budget + SLACK, max(samples)
    assert samples[-1] > budget // 3


def test_repeated_prompts_are_remembered() -> None:
    tok = SimulatedTokenizer(memo_bytes=1024 * 1024)
    rng = random.Random(5)
    texts = [text(rng, index) for index in range(20)]
    first = [tok.encode(t) for t in texts]
    gc.collect()
    tracemalloc.start()
    try:
        again = [tok.encode(t) for t in texts]
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert again == first
    assert kept <= sum(len(ids) for ids in again) * 40 + SLACK  # only the returned lists
