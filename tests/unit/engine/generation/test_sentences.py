"""Random-mode text from the reference's sentence bank."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest

from vllm_sim.engine.generation import SENTENCES, SentenceBank
from vllm_sim.engine.tokenizer import ChatTurn, SimulatedTokenizer, chat_from_turns

EXPECTED_TOKEN_COUNTS = [38, 9, 9, 13, 7, 10, 8, 11, 16, 5, 25]


def test_bank_texts() -> None:
    assert len(SENTENCES) == 11
    assert all(sentence.endswith(" ") and not sentence.endswith("  ") for sentence in SENTENCES)
    assert SENTENCES[0] == r"Testing@, #testing 1$ ,2%,3^, [4&*5], 6~, 7-_ + (8 : 9) / \ < > . "
    assert SENTENCES[10].startswith("Give a man a fish and you feed him for a day; teach")


def test_sentence_token_counts(bank: SentenceBank) -> None:
    assert [len(ids) for ids, _ in bank.sentences] == EXPECTED_TOKEN_COUNTS


def split_into_sentences(ids: Sequence[int], bank: SentenceBank) -> int:
    """Walks `ids` as whole bank sentences plus one prefix; returns the sentence count."""
    position, whole = 0, 0
    while position < len(ids):
        rest = list(ids[position:])
        full = [s for s, _ in bank.sentences if rest[: len(s)] == s]
        if full:
            position += len(full[0])
            whole += 1
            continue
        assert any(s[: len(rest)] == rest for s, _ in bank.sentences), "not a sentence prefix"
        break
    return whole


@pytest.mark.parametrize("n", [0, 1, 5, 38, 39, 100, 1000])
def test_generates_exactly_n_tokens(bank: SentenceBank, n: int) -> None:
    ids, pieces = bank.generate(random.Random(n), n)
    assert len(ids) == len(pieces) == n


def test_text_is_whole_sentences_plus_prefix(tok: SimulatedTokenizer, bank: SentenceBank) -> None:
    rng = random.Random(11)
    for _ in range(300):
        ids, pieces = bank.generate(rng, rng.randint(1, 200))
        split_into_sentences(ids, bank)
        # Pieces are the tokenizer's own: re-tokenizing the text gives the same ids.
        assert tok.tokenize("".join(pieces)) == (ids, pieces)


def test_generated_ids_decode(tok: SimulatedTokenizer, bank: SentenceBank) -> None:
    ids, pieces = bank.generate(random.Random(3), 77)
    assert tok.decode(ids) == "".join(pieces)


def test_sentence_choice_is_uniform(bank: SentenceBank) -> None:
    rng = random.Random(12)
    firsts = Counter(tuple(bank.generate(rng, 5)[0]) for _ in range(22_000))
    assert len(firsts) == 11
    assert all(abs(count - 2000) < 200 for count in firsts.values())


def test_same_seed_same_text(bank: SentenceBank) -> None:
    first = bank.generate(random.Random(100), 10)
    assert bank.generate(random.Random(100), 10) == first
    assert SentenceBank(SimulatedTokenizer()).generate(random.Random(100), 10) == first
    texts = {"".join(bank.generate(random.Random(seed), 40)[1]) for seed in range(20)}
    assert len(texts) > 10


def test_returned_lists_do_not_alias_the_bank(bank: SentenceBank) -> None:
    ids, pieces = bank.generate(random.Random(0), 1000)
    ids.clear()
    pieces.clear()
    assert [len(s) for s, _ in bank.sentences] == EXPECTED_TOKEN_COUNTS


class EmptyTokenizer(SimulatedTokenizer):
    def tokenize(self, text: str, add_special_tokens: bool = False) -> tuple[list[int], list[str]]:
        return [], []


def test_bank_without_tokens_is_rejected() -> None:
    with pytest.raises(ValueError, match="no tokens"):
        SentenceBank(EmptyTokenizer())


def test_chat_render_is_unrelated_to_bank(tok: SimulatedTokenizer) -> None:
    # Guard against the template accidentally depending on bank state.
    rendered = tok.render_chat(chat_from_turns([ChatTurn("user", SENTENCES[9])]))
    assert rendered == "### user: The rest is silence. \n"
