"""Token usage of a request, counted once for every protocol."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.sequence import Sequence


# init=False: mypyc compiles a hand-written __init__; the one dataclasses writes stays
# interpreted, and costs several times more for every request that makes one.
@dataclass(slots=True, init=False)  # not frozen: a frozen one pays for every field it sets
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: a cache_threshold answer reports no details
    reasoning_tokens: int | None  # None: no reasoning parser, no completion details

    def __init__(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None,
        reasoning_tokens: int | None = None,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.cached_tokens = cached_tokens
        self.reasoning_tokens = reasoning_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def openai_json(self, details: bool = False) -> dict[str, object]:
        """The `usage` object of chat and completions answers, in vLLM's key order. vLLM
        reports prompt token details only when asked to (--enable-prompt-tokens-details)
        and some were cached; its completion token details only with a reasoning parser."""
        cached = self.cached_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.total_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached} if details and cached else None,
            "completion_tokens_details": self.completion_details(),
        }

    def completion_details(self) -> dict[str, int] | None:
        reasoning = self.reasoning_tokens
        return None if reasoning is None else {"reasoning_tokens": reasoning}

    def stream_json(self, details: bool = False) -> dict[str, object]:
        """The usage chunk's: the same without its null details."""
        usage: dict[str, object] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.total_tokens,
            "completion_tokens": self.completion_tokens,
        }
        if details and self.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        completion = self.completion_details()
        if completion is not None:
            usage["completion_tokens_details"] = completion
        return usage


def usage_of(sequences: list[Sequence]) -> Usage:
    """Prompt tokens and cached tokens count once per prompt (not per choice): what each
    prompt found cached when it was first looked up; completions add up."""
    if len(sequences) == 1:  # the common case, without the bookkeeping below
        seq = sequences[0]
        first = seq.prompt.first_hit
        hit = seq.cached_tokens if first is None else first
        refused = seq.finish_reason == Finish.CACHE_THRESHOLD
        reasoning = None if seq.request.reasoning is None else seq.reasoning_tokens
        return Usage(seq.prompt_tokens, seq.completion_tokens, None if refused else hit, reasoning)
    seen: set[int] = set()
    prompt = hits = 0
    for seq in sequences:
        if seq.prompt_index not in seen:
            seen.add(seq.prompt_index)
            prompt += seq.prompt_tokens
            first = seq.prompt.first_hit
            hits += seq.cached_tokens if first is None else first
    completion = sum(seq.completion_tokens for seq in sequences)
    refused = any(seq.finish_reason == Finish.CACHE_THRESHOLD for seq in sequences)
    reasoning = None
    if sequences and sequences[0].request.reasoning is not None:
        reasoning = sum(seq.reasoning_tokens for seq in sequences)
    return Usage(prompt, completion, None if refused else hits, reasoning)
