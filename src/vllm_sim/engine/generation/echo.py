"""Echo-mode content: the response repeats the last message (chat) or the prompt (completions),
or the ids of a pre-tokenized prompt."""

from __future__ import annotations

from collections.abc import Sequence

from vllm_sim.engine.tokenizer import Tokenizer


def echo_tokens(tokenizer: Tokenizer, text: str) -> tuple[list[int], list[str]]:
    """The tokens of `text`; the pieces join back to the echoed text."""
    return tokenizer.tokenize(text)


def echo_token_ids(ids: Sequence[int]) -> tuple[list[int], list[str]]:
    """Echo of a pre-tokenized prompt: text `"1,2,3"`, one piece per id (`"1,"`, `"2,"`, `"3"`)."""
    pieces = [f"{token_id}," for token_id in ids]
    if pieces:
        pieces[-1] = str(ids[-1])
    return list(ids), pieces
