"""Token usage of a request, counted once for every protocol."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_sim.engine.core import CACHE_THRESHOLD
from vllm_sim.engine.sequence import Sequence


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: a cache_threshold answer reports no details

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def openai_json(self) -> dict[str, object]:
        """The `usage` object of chat and completions responses."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": None
            if self.cached_tokens is None
            else {"cached_tokens": self.cached_tokens},
        }


def usage_of(sequences: list[Sequence]) -> Usage:
    """Prompt tokens count once per prompt (not per choice); completions add up."""
    seen: set[int] = set()
    prompt = 0
    for seq in sequences:
        if seq.prompt_index not in seen:
            seen.add(seq.prompt_index)
            prompt += seq.prompt_tokens
    completion = sum(seq.completion_tokens for seq in sequences)
    cached: int | None = sequences[0].cached_tokens if sequences else 0
    if any(seq.finish_reason == CACHE_THRESHOLD for seq in sequences):
        cached = None
    return Usage(prompt, completion, cached)
