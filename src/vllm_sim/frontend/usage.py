"""Token usage of a request, counted once for every protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.sequence import Sequence

# What `usage.prompt_tokens_details` lists under --enable-prompt-tokens-details: vLLM 0.32
# writes the object on every answer then (cached_tokens 0 included); its chat answers count
# the prompt tokens they newly stored in the prefix cache (`created_cache_tokens`), its
# completions leave that null. "none": the flag is off, the details are null.
PromptDetails = Literal["none", "cached", "created"]


# init=False: mypyc compiles a hand-written __init__; the one dataclasses writes stays
# interpreted, and costs several times more for every request that makes one.
@dataclass(slots=True, init=False)  # not frozen: a frozen one pays for every field it sets
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: a cache_threshold answer reports no details
    reasoning_tokens: int | None  # None: no reasoning parser, no completion details
    created_tokens: int  # prompt tokens stored in the prefix cache as new full blocks

    def __init__(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None,
        reasoning_tokens: int | None = None,
        created_tokens: int = 0,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.cached_tokens = cached_tokens
        self.reasoning_tokens = reasoning_tokens
        self.created_tokens = created_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def openai_json(self, details: PromptDetails = "none") -> dict[str, object]:
        """The `usage` object of chat and completions answers, in vLLM's key order. vLLM
        reports prompt token details only when asked to (--enable-prompt-tokens-details;
        none for a cache_threshold refusal); its completion token details only with a
        reasoning parser."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.total_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": self.prompt_details(details),
            "completion_tokens_details": self.completion_details(),
        }

    def prompt_details(self, details: PromptDetails) -> dict[str, int | None] | None:
        cached = self.cached_tokens
        if details == "none" or cached is None:
            return None
        created = self.created_tokens if details == "created" else None
        return {"cached_tokens": cached, "created_cache_tokens": created, "multimodal_tokens": None}

    def completion_details(self) -> dict[str, int] | None:
        reasoning = self.reasoning_tokens
        return None if reasoning is None else {"reasoning_tokens": reasoning}

    def stream_json(self, details: PromptDetails = "none") -> dict[str, object]:
        """The usage chunk's: the same without its null values (vLLM leaves out unset and
        null keys there)."""
        usage: dict[str, object] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.total_tokens,
            "completion_tokens": self.completion_tokens,
        }
        prompt = self.prompt_details(details)
        if prompt is not None:
            usage["prompt_tokens_details"] = {k: v for k, v in prompt.items() if v is not None}
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
        cached = None if refused else hit
        created = seq.prompt.first_created
        return Usage(seq.prompt_tokens, seq.completion_tokens, cached, reasoning, created)
    seen: set[int] = set()
    prompt = hits = created = 0
    for seq in sequences:
        if seq.prompt_index not in seen:
            seen.add(seq.prompt_index)
            prompt += seq.prompt_tokens
            first = seq.prompt.first_hit
            hits += seq.cached_tokens if first is None else first
            created += seq.prompt.first_created
    completion = sum(seq.completion_tokens for seq in sequences)
    refused = any(seq.finish_reason == Finish.CACHE_THRESHOLD for seq in sequences)
    reasoning = None
    if sequences and sequences[0].request.reasoning is not None:
        reasoning = sum(seq.reasoning_tokens for seq in sequences)
    return Usage(prompt, completion, None if refused else hits, reasoning, created)
