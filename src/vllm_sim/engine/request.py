"""The protocol-independent request every API handler turns its body into."""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_sim.engine.generation.stops import StopRules
from vllm_sim.engine.generation.toolcalls import ToolPlan


# init=False: mypyc compiles a hand-written __init__; the one dataclasses writes stays
# interpreted, and costs several times more for every request that makes one.
@dataclass(slots=True, init=False)
class Prompt:
    """One prompt: its token ids, and what echo mode repeats back."""

    token_ids: list[int]
    # Echo mode repeats this text; None means "echo the token ids" (pre-tokenized prompts).
    echo_text: str | None
    # Multimodal features (render shape), so image blocks hash with their image.
    features: Mapping[str, Mapping[str, Any]] | None
    # In echo mode, echo_text's tokens, made where the request is read (off the event
    # loop for a large one) rather than when the sequence starts.
    echo_tokens: tuple[list[int], list[str]] | None
    # Its full blocks' hashes, set by the engine at submission (none: no prefix caching).
    block_hashes: Sequence[int]
    # The cached prefix (tokens) when the prompt's first sequence looked it up: what the
    # request found in the cache, before its own copies stored anything.
    first_hit: int | None
    # The prompt tokens that first lookup stored as new full blocks of the prefix cache.
    first_created: int

    def __init__(
        self,
        token_ids: list[int],
        echo_text: str | None = None,
        features: Mapping[str, Mapping[str, Any]] | None = None,
        echo_tokens: tuple[list[int], list[str]] | None = None,
        block_hashes: Sequence[int] = (),
        first_hit: int | None = None,
    ) -> None:
        self.token_ids = token_ids
        self.echo_text = echo_text
        self.features = features
        self.echo_tokens = echo_tokens
        self.block_hashes = block_hashes
        self.first_hit = first_hit
        self.first_created = 0


_VISION_MODALITIES = ("image", "video")


def image_work(
    features: Mapping[str, Mapping[str, Any]] | None, computed: int
) -> tuple[int, float]:
    """What the vision encoder runs on for a prompt whose first `computed` tokens are in
    the KV cache: the tokens of its images and videos that end past them (a prefix hit
    covering an image needs no encoding), and the sum of each one's tokens squared."""
    if not features:
        return 0, 0.0
    placeholders = features.get("mm_placeholders") or {}
    tokens, pairs = 0, 0.0
    for modality in _VISION_MODALITIES:
        for span in placeholders.get(modality) or ():
            length = int(span["length"])
            if int(span["offset"]) + length > computed:
                tokens += length
                pairs += float(length * length)
    return tokens, pairs


class Delivery(enum.Enum):
    """How a request's answer reaches its client, which decides where the latencies vLLM
    reports are taken: at the engine's release of a token, or when the front end writes it
    (the recorder's output_written), so that they are what the client got even when this
    process writes later than its engine released."""

    # No write is reported (a what-if replay, embeddings): every latency at the release.
    RELEASED = "released"
    # One write of the whole answer once it ended: its end-to-end latency at that write.
    WHOLE = "whole"
    # Written as released: the first token, each inter-token gap and the end at the writes.
    STREAM = "stream"


@dataclass(frozen=True, slots=True)
class JsonPlan:
    """Structured output: the content is JSON matching `schema` (None: any JSON object)."""

    schema: Mapping[str, Any] | None


# init=False: mypyc compiles a hand-written __init__; the one dataclasses writes stays
# interpreted, and costs several times more for every request that makes one.
@dataclass(slots=True, init=False)
class GenerationRequest:
    """What the engine needs to run a request, whatever protocol it came in on.

    A request with P prompts and n choices becomes P x n sequences, each scheduled on
    its own (vLLM does the same with parallel sampling and prompt batches).
    """

    request_id: str
    model: str  # the model name responses and metrics carry
    prompts: list[Prompt]
    n: int
    max_tokens: int | None
    ignore_eos: bool
    do_remote_prefill: bool
    do_remote_decode: bool
    lora: str | None  # adapter name when the request targets a LoRA
    with_image: bool  # omni: an image follows the text
    tools: ToolPlan | None
    json_output: JsonPlan | None
    cache_hit_threshold: float | None  # the request's own, if it sent one
    force_cache_threshold: bool  # X-Cache-Threshold-Finish-Reason: true
    arrival_time: float  # wall clock (time.time()) when the request arrived
    # The engine clock's reading when the server began to read the request (None: when it
    # was submitted); the latencies vLLM reports count from it.
    received: float | None
    # A pooling request (embeddings): its prompts are prefilled and nothing is generated;
    # it queues, takes a slot and is timed by the prefill model like any other.
    pooling: bool
    # Param named in a context-length error (the field that carried max_tokens, if any).
    max_tokens_field: str
    logprobs: int | None  # alternatives the answer lists per token; None: no logprobs
    stops: StopRules | None
    prompt_logprobs: int | None  # alternatives listed per prompt token
    seed: int | None  # the same seed, the same answer (choices differ among them)
    greedy: bool  # temperature 0: the same prompt, the same answer, in every choice
    rng: random.Random | None  # the seeded generator, made at the first choice
    # The share of each answer's tokens that is reasoning (0.0: thinking turned off);
    # None: no reasoning parser, no reasoning part and no reasoning token count.
    reasoning: float | None
    reasoning_budget: int | None  # at most this many reasoning tokens (None: no cap)
    delivery: Delivery  # where its latencies are observed (see Delivery)

    def __init__(
        self,
        request_id: str,
        model: str,
        prompts: list[Prompt],
        n: int = 1,
        max_tokens: int | None = None,
        ignore_eos: bool = False,
        do_remote_prefill: bool = False,
        do_remote_decode: bool = False,
        lora: str | None = None,
        with_image: bool = False,
        tools: ToolPlan | None = None,
        json_output: JsonPlan | None = None,
        cache_hit_threshold: float | None = None,
        force_cache_threshold: bool = False,
        arrival_time: float = 0.0,
        received: float | None = None,
        pooling: bool = False,
        max_tokens_field: str = "max_tokens",
        logprobs: int | None = None,
        stops: StopRules | None = None,
        prompt_logprobs: int | None = None,
        seed: int | None = None,
        greedy: bool = False,
        rng: random.Random | None = None,
        reasoning: float | None = None,
        reasoning_budget: int | None = None,
        delivery: Delivery = Delivery.RELEASED,
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.prompts = prompts
        self.n = n
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.do_remote_prefill = do_remote_prefill
        self.do_remote_decode = do_remote_decode
        self.lora = lora
        self.with_image = with_image
        self.tools = tools
        self.json_output = json_output
        self.cache_hit_threshold = cache_hit_threshold
        self.force_cache_threshold = force_cache_threshold
        self.arrival_time = arrival_time
        self.received = received
        self.pooling = pooling
        self.max_tokens_field = max_tokens_field
        self.logprobs = logprobs
        self.stops = stops
        self.prompt_logprobs = prompt_logprobs
        self.seed = seed
        self.greedy = greedy
        self.rng = rng
        self.reasoning = reasoning
        self.reasoning_budget = reasoning_budget
        self.delivery = delivery
