"""The tokenizer interface the engine and API layers program against."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """One chat message, already flattened to text by the API layer."""

    role: str
    text: str
    tool_call_id: str | None = None


class Tokenizer(Protocol):
    """What every tokenizer (simulated or render-service backed) offers."""

    # The end-of-sequence token a model emits when it ends its answer by itself; a
    # special token, so its text is "" in answers.
    eos_token_id: int

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`."""
        ...

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        """Token ids and their string pieces; the pieces join back to the text."""
        ...

    def render_chat(self, turns: Sequence[ChatTurn]) -> str:
        """The prompt text a chat becomes before tokenization."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a sequence of token ids."""
        ...

    def piece(self, token_id: int) -> str:
        """Text of one token id."""
        ...
