"""Random-mode text from the predefined sentence bank, the reference's sentences."""

from __future__ import annotations

import random
from typing import Final

from vllm_sim.engine.generation.draws import below
from vllm_sim.engine.tokenizer import Tokenizer

SENTENCES: Final[tuple[str, ...]] = (
    "Testing@, #testing 1$ ,2%,3^, [4&*5], 6~, 7-_ + (8 : 9) / \\ < > . ",
    "Testing, testing 1,2,3. ",
    "I am fine, how are you today? ",
    "I am your AI assistant, how can I help you today? ",
    "Today is a nice sunny day. ",
    "The temperature here is twenty-five degrees centigrade. ",
    "Today it is partially cloudy and raining. ",
    "To be or not to be that is the question. ",
    "Alas, poor Yorick! I knew him, Horatio: A fellow of infinite jest ",
    "The rest is silence. ",
    "Give a man a fish and you feed him for a day; "
    "teach a man to fish and you feed him for a lifetime ",
)


class SentenceBank:
    """The sentence bank, tokenized once with the active tokenizer."""

    def __init__(self, tokenizer: Tokenizer, sentences: tuple[str, ...] = SENTENCES) -> None:
        tokenized = [tokenizer.tokenize(sentence) for sentence in sentences]
        # A sentence with no tokens would make generate() loop forever.
        self._sentences = tuple((ids, pieces) for ids, pieces in tokenized if ids)
        if not self._sentences:
            raise ValueError("sentence bank tokenized to no tokens")

    @property
    def sentences(self) -> tuple[tuple[list[int], list[str]], ...]:
        """(ids, pieces) of each usable sentence; callers must not mutate them."""
        return self._sentences

    def generate(self, rng: random.Random, n: int) -> tuple[list[int], list[str]]:
        """Exactly `n` tokens: whole random sentences, the last one truncated."""
        ids: list[int] = []
        pieces: list[str] = []
        remaining = n
        while remaining > 0:
            sentences = self._sentences
            sentence_ids, sentence_pieces = sentences[below(rng, len(sentences))]
            if len(sentence_ids) <= remaining:
                ids += sentence_ids
                pieces += sentence_pieces
            else:
                ids += sentence_ids[:remaining]
                pieces += sentence_pieces[:remaining]
            remaining = n - len(ids)
        return ids, pieces
