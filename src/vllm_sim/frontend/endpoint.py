"""The interface a generation protocol implements, and what the pipeline hands it back.

A protocol says only what differs between APIs: how its body decodes, where its common
knobs (max tokens, stream, n, ...) live, how its body becomes prompts, tools and output
formats, how it frames a stream, and what its final answer looks like. Everything else
(failure injection, request ids, models, validation of the common knobs, admission,
waiting, errors and headers) is the pipeline's, the same for every protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from vllm_sim.engine.generation.stops import StopRules
from vllm_sim.engine.generation.toolcalls import ToolPlan
from vllm_sim.engine.request import JsonPlan, Prompt
from vllm_sim.engine.sequence import RequestStream
from vllm_sim.errors import RequestError
from vllm_sim.frontend.capabilities import Capabilities
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.driver import ChunkEncoder
from vllm_sim.frontend.envelope import error_body
from vllm_sim.frontend.render_service import RenderCall
from vllm_sim.frontend.transfer import KvTransferParams


class ModelNamed(Protocol):
    """Every generation body names (or omits) the model it asks for."""

    model: str | None


B = TypeVar("B", bound=ModelNamed)


class StreamOptions(msgspec.Struct):
    """OpenAI's `stream_options`. A key left out is UNSET (null is also the default), so
    that `{}` can count as no options, as vLLM counts it."""

    include_usage: bool | msgspec.UnsetType | None = msgspec.UNSET
    continuous_usage_stats: bool | msgspec.UnsetType | None = msgspec.UNSET

    def given(self) -> bool:
        """Whether any option is set: an empty object sets none (vLLM reads it as falsy)."""
        return (
            self.include_usage is not msgspec.UNSET
            or self.continuous_usage_stats is not msgspec.UNSET
        )


class OpenAIBody(msgspec.Struct, kw_only=True):
    """The fields the OpenAI-style bodies (chat, completions, generate) share. vLLM
    declares them Optional: an explicit null means the default."""

    model: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    ignore_eos: bool | None = None
    kv_transfer_params: KvTransferParams | None = None


@dataclass(slots=True)
class Options:
    """The knobs every generation protocol has, read from its own field names."""

    max_tokens: int | None
    max_tokens_field: str  # the field that carried max_tokens, named in errors
    stream: bool = False
    ignore_eos: bool = False
    n: int | None = None
    include_usage: bool = False  # stream_options.include_usage
    transfer: KvTransferParams | None = None
    cache_hit_threshold: float | None = None
    logprobs: int | None = None  # alternatives listed per token; None: no logprobs
    continuous_usage: bool = False  # stream_options.continuous_usage_stats
    stops: StopRules | None = None
    seed: int | None = None
    greedy: bool = False  # temperature 0
    token_ids: bool = False  # return_token_ids
    prompt_logprobs: int | None = None
    echo: bool = False  # completions: the prompt leads the answer (max_tokens 0 allowed)
    # chat_template_kwargs.enable_thinking as the request set it (None: not set), and a
    # reasoning effort of "none": what turns reasoning off for parsers that read them.
    enable_thinking: bool | None = None
    # The most reasoning tokens an answer may have (chat's thinking_token_budget, Anthropic's
    # thinking.budget_tokens); None: as many as the reasoning ratio gives.
    reasoning_budget: int | None = None

    @classmethod
    def of(
        cls,
        body: OpenAIBody,
        max_tokens: int | None,
        max_tokens_field: str,
        n: int | None = None,
        cache_hit_threshold: float | None = None,
        logprobs: int | None = None,
    ) -> Options:
        """The knobs of an OpenAI-style body, whose shared fields have the same names."""
        stream_options = body.stream_options
        if stream_options is not None and not body.stream and stream_options.given():
            raise RequestError(
                400,
                "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
                "stream_options",
            )
        usage = stream_options is not None and bool(stream_options.include_usage)
        continuous = usage and bool(stream_options and stream_options.continuous_usage_stats)
        # Positional: this runs on every request, and keywords cost more.
        return cls(
            max_tokens,
            max_tokens_field,
            bool(body.stream),
            bool(body.ignore_eos),
            n,
            usage,
            body.kv_transfer_params,
            cache_hit_threshold,
            logprobs,
            continuous,
        )


@dataclass(slots=True)
class Plan:
    """What a request asks the engine to say: its prompts, and tools or JSON it may answer."""

    prompts: list[Prompt]
    tools: ToolPlan | None = None
    json_output: JsonPlan | None = None
    # With a render service, what to ask it for each prompt (None: keep the prompt's ids).
    render: list[RenderCall | None] | None = None


@dataclass(slots=True)
class Call(Generic[B]):
    """One admitted request, as the protocol's encoders read it."""

    ctx: ApiContext
    request_id: str
    model: str
    body: B
    options: Options
    stream: RequestStream


class Endpoint(Generic[B]):
    """One generation protocol, served at `path` with the shared features `capabilities`
    allows. Subclasses set `decoder` and implement the four methods; `error_body` is
    OpenAI's envelope unless the protocol has its own."""

    decoder: msgspec.json.Decoder[B]

    def __init__(self, path: str, capabilities: Capabilities) -> None:
        self.path = path
        self.capabilities = capabilities

    def options(self, body: B) -> Options:
        """The common knobs, after the protocol's own rules on its fields."""
        raise NotImplementedError

    def plan(self, ctx: ApiContext, body: B) -> Plan:
        """Prompts, tools and output format; raises RequestError naming a bad field."""
        raise NotImplementedError

    def chunks(self, call: Call[B]) -> ChunkEncoder[Any]:
        """The stream framing of one request, in the pieces its transport writes."""
        raise NotImplementedError

    def answer(self, call: Call[B]) -> dict[str, Any] | bytes:
        """The whole answer of a finished request that was not streamed: a dict, or bytes
        when the protocol writes a common answer straight from precomputed parts. Never
        bytes when the pipeline has keys to add (a prefill's kv_transfer_params)."""
        raise NotImplementedError

    def error_body(self, error: RequestError) -> bytes:
        return error_body(error)
