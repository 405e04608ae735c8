"""The protocol-independent request every API handler turns its body into."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_sim.engine.generation.stops import StopRules
from vllm_sim.engine.generation.toolcalls import ToolPlan


@dataclass(slots=True)
class Prompt:
    """One prompt: its token ids, and what echo mode repeats back."""

    token_ids: list[int]
    # Echo mode repeats this text; None means "echo the token ids" (pre-tokenized prompts).
    echo_text: str | None = None
    # Multimodal features (render shape), so image blocks hash with their image.
    features: Mapping[str, Mapping[str, Any]] | None = None
    # In echo mode, echo_text's tokens, made where the request is read (off the event
    # loop for a large one) rather than when the sequence starts.
    echo_tokens: tuple[list[int], list[str]] | None = None
    # Its full blocks' hashes, set by the engine at submission (none: no prefix caching).
    block_hashes: Sequence[int] = ()
    # The cached prefix (tokens) when the prompt's first sequence looked it up: what the
    # request found in the cache, before its own copies stored anything.
    first_hit: int | None = None


@dataclass(frozen=True, slots=True)
class JsonPlan:
    """Structured output: the content is JSON matching `schema` (None: any JSON object)."""

    schema: Mapping[str, Any] | None


@dataclass(slots=True)
class GenerationRequest:
    """What the engine needs to run a request, whatever protocol it came in on.

    A request with P prompts and n choices becomes P x n sequences, each scheduled on
    its own (vLLM does the same with parallel sampling and prompt batches).
    """

    request_id: str
    model: str  # the model name responses and metrics carry
    prompts: list[Prompt]
    n: int = 1
    max_tokens: int | None = None
    ignore_eos: bool = False
    do_remote_prefill: bool = False
    do_remote_decode: bool = False
    lora: str | None = None  # adapter name when the request targets a LoRA
    with_image: bool = False  # omni: an image follows the text
    tools: ToolPlan | None = None
    json_output: JsonPlan | None = None
    cache_hit_threshold: float | None = None  # the request's own, if it sent one
    force_cache_threshold: bool = False  # X-Cache-Threshold-Finish-Reason: true
    arrival_time: float = 0.0  # wall clock (time.time()) when the request arrived
    # The engine clock's reading when the server began to read the request (None: when it
    # was submitted); the latencies vLLM reports count from it.
    received: float | None = None
    # A pooling request (embeddings): its prompts are prefilled and nothing is generated;
    # it queues, takes a slot and is timed by the prefill model like any other.
    pooling: bool = False
    # Param named in a context-length error (the field that carried max_tokens, if any).
    max_tokens_field: str = "max_tokens"
    logprobs: int | None = None  # alternatives the answer lists per token; None: no logprobs
    stops: StopRules | None = None
    prompt_logprobs: int | None = None  # alternatives listed per prompt token
    seed: int | None = None  # the same seed, the same answer (choices differ among them)
    greedy: bool = False  # temperature 0: the same prompt, the same answer, in every choice
    rng: random.Random | None = None  # the seeded generator, made at the first choice
