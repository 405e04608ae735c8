"""POST /v1/chat/completions: parse into a GenerationRequest, encode what the engine says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.toolcalls import ToolCallOutput, ToolPlan
from vllm_sim.engine.request import JsonPlan, Prompt
from vllm_sim.engine.sequence import Sequence
from vllm_sim.errors import RequestError
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Call, Endpoint, Options, Plan
from vllm_sim.frontend.omni import image_block
from vllm_sim.protocols.common.chat_messages import ChatMessage
from vllm_sim.protocols.common.conversation import (
    mm_features,
    read_conversation,
    render,
    thinking_kwargs,
)
from vllm_sim.protocols.common.encoding import (
    AnswerShape,
    answer_shape,
    encoded_choices,
    openai_object,
    plain_object,
    plain_sequence,
    plain_template,
    prompt_details,
)
from vllm_sim.protocols.common.logprobs import ChatLogprobs, check_logprobs_count, prompt_logprobs
from vllm_sim.protocols.common.sampling import ChatSampling, sampling_options
from vllm_sim.protocols.common.tools import (
    parse_response_format,
    parse_tool_choice,
    parse_tools,
    plan_tools,
    probe_schema,
    tool_candidates,
)
from vllm_sim.protocols.openai.chat_stream import (
    TOOL_CALL_PREFIX,
    ChatChunks,
    ToolMode,
    finish_reason,
)

_encode = msgspec.json.encode


class ChatRequest(ChatSampling, kw_only=True):
    messages: list[ChatMessage]
    n: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None  # each tool is checked by parse_tools
    # UNSET (absent) means auto; an explicit null is an error, as in the reference.
    # Any: a wrong type gets the reference's own message from parse_tool_choice.
    tool_choice: Any | msgspec.UnsetType = msgspec.UNSET
    # Any: a wrong type gets parse_response_format's own message, naming what it got.
    response_format: Any = None
    cache_hit_threshold: float | None = None


class ChatEndpoint(Endpoint[ChatRequest]):
    decoder = msgspec.json.Decoder(ChatRequest)

    def options(self, body: ChatRequest) -> Options:
        field = "max_completion_tokens"
        max_tokens = body.max_completion_tokens
        if max_tokens is None:
            max_tokens, field = body.max_tokens, "max_tokens"
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        options = Options.of(body, max_tokens, field, body.n, body.cache_hit_threshold, logprobs)
        options.enable_thinking = _enable_thinking(body)
        return sampling_options(options, body)

    def plan(self, ctx: ApiContext, body: ChatRequest) -> Plan:
        check_logprobs_count(body.top_logprobs, "top_logprobs")
        if body.top_logprobs and not body.logprobs:
            raise RequestError(
                400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
            )
        tools = _tool_plan(ctx, body)
        if body.reasoning_effort is not None:  # the template reads it as enable_thinking
            body.chat_template_kwargs = thinking_kwargs(
                body.chat_template_kwargs, body.reasoning_effort
            )
        plan = Plan([_prompt(ctx, body)], tools, _json_plan(ctx, body))
        if ctx.render_service is not None:
            plan.render = [ctx.render_service.chat_call(body.messages, _has_image(body.messages))]
        return plan

    def chunks(self, call: Call[ChatRequest]) -> ChatChunks:
        return ChatChunks(
            call.stream,
            answer_shape(call, "chatcmpl-"),
            _top(call),
            _tool_mode(call),
            not call.body.include_reasoning,
        )

    def answer(self, call: Call[ChatRequest]) -> dict[str, Any] | bytes:
        plain = _plain_completion(call)
        if plain is not None:
            return plain
        return _completion(call, answer_shape(call, "chatcmpl-"))


def _enable_thinking(body: ChatRequest) -> bool | None:
    """Whether the request turned thinking on or off: chat_template_kwargs.enable_thinking,
    else a reasoning effort ("none" is off, any other on); None when it said neither."""
    kwargs = body.chat_template_kwargs
    if kwargs is not None:
        flag = kwargs.get("enable_thinking")
        if isinstance(flag, bool):
            return flag
    effort = body.reasoning_effort
    return None if effort is None else effort != "none"


def _top(call: Call[ChatRequest]) -> int:
    """How many alternatives each token's logprobs list; -1 for no logprobs at all."""
    body = call.body
    return (body.top_logprobs or 0) if body.logprobs else -1


def _tool_mode(call: Call[ChatRequest]) -> ToolMode:
    """How the request chose its tools, which decides how a call is reported: a named tool
    finishes with "stop", and a forced call has empty rather than null content."""
    choice = call.body.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return "named"  # other object choices (custom, allowed_tools) act as auto
    return "required" if choice == "required" else "auto"


def _prompt(ctx: ApiContext, body: ChatRequest) -> Prompt:
    """The rendered conversation's tokens; with prefix caching on, its media features too,
    so that blocks holding an image hash with that image."""
    conversation = read_conversation(body.messages)
    turns = conversation.turns
    echo_text = turns[-1].text if turns else ""
    text = render(ctx.tokenizer, body.messages, conversation, body)
    special = body.add_special_tokens
    if not (ctx.settings.prefix_caching and conversation.media):
        return Prompt(ctx.tokenizer.encode(text, special), echo_text)
    ids, pieces = ctx.tokenizer.tokenize(text, special)
    return Prompt(ids, echo_text, mm_features(conversation, text, pieces))


def _has_image(messages: list[ChatMessage]) -> bool:
    return any(
        block.type == "image_url"
        for message in messages
        if isinstance(message.content, list)
        for block in message.content
    )


def _tool_plan(ctx: ApiContext, body: ChatRequest) -> ToolPlan | None:
    """The tools this request may call; every tool is checked even when none may be."""
    if body.tools is None and body.tool_choice is msgspec.UNSET:
        return None  # the common case, answered without the parsers
    tools = parse_tools(body.tools, ctx.settings.skip_tool_validation)
    choice = parse_tool_choice(body.tool_choice)
    candidates = tool_candidates(tools, choice)
    forced = choice.mode in ("required", "named")
    return plan_tools(candidates, forced, ctx.engine.view.synthesis)


def _json_plan(ctx: ApiContext, body: ChatRequest) -> JsonPlan | None:
    if body.response_format is None:
        return None
    response_format = parse_response_format(body.response_format)
    if response_format is None or response_format.kind == "text":
        return None
    if response_format.schema is not None:
        settings = ctx.engine.view.synthesis
        probe_schema(response_format.schema, "response_format", "response_format", settings)
    return JsonPlan(response_format.schema)


@dataclass(frozen=True, slots=True)
class ChoiceShape:
    """How each choice of a non-streamed answer is written."""

    logprobs: ChatLogprobs | None
    token_ids: bool  # return_token_ids
    tool_mode: ToolMode
    hide_reasoning: bool = False  # include_reasoning: false


def _completion(call: Call[ChatRequest], shape: AnswerShape) -> dict[str, Any]:
    top = _top(call)
    how = ChoiceShape(
        ChatLogprobs(top) if top >= 0 else None,
        shape.token_ids,
        _tool_mode(call),
        not call.body.include_reasoning,
    )
    stream = call.stream
    answer = openai_object(stream, shape, "chat.completion", encoded_choices(stream, _choice, how))
    prompt = stream.sequences[0].prompt
    answer["prompt_logprobs"] = prompt_logprobs(
        prompt.token_ids, call.options.prompt_logprobs, call.ctx.tokenizer.piece
    )
    answer["prompt_token_ids"] = prompt.token_ids if shape.token_ids else None
    answer["prompt_text"] = None
    answer["kv_transfer_params"] = None
    answer["ec_transfer_params"] = None
    answer["metrics"] = None
    return answer


_PLAIN_TEMPLATE = plain_template(
    b'"chat.completion"',
    b',"routed_experts":null',
    b',"prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,'
    b'"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}',
)
_PLAIN_MESSAGE_TAIL = (
    b',"refusal":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null}'
    b',"logprobs":null'
)


def _plain_completion(call: Call[ChatRequest]) -> bytes | None:
    """The common answer (one text choice; no logprobs, ids, image, tools or transfer)
    written from precomputed parts: the same bytes as `_completion`'s, at a third of the
    cost. None for any other answer."""
    stream = call.stream
    seq = plain_sequence(call.options, stream)
    if seq is None:
        return None
    text = (
        b'{"index":0,"message":{"role":"assistant","content":'
        + _encode("".join(seq.output_pieces))
        + _PLAIN_MESSAGE_TAIL
    )
    settings = call.ctx.settings
    shape = (settings.system_fingerprint, prompt_details(settings.prompt_tokens_details, True))
    return plain_object(
        stream, "chatcmpl-" + call.request_id, call.model, _PLAIN_TEMPLATE, text, shape
    )


def _message(content: object, reasoning: str | None = None) -> dict[str, Any]:
    """An assistant message with every key vLLM sends."""
    return {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": reasoning,
    }


def _choice(seq: Sequence, how: ChoiceShape) -> dict[str, Any]:
    if seq.tool_calls is not None:
        message = _tool_call_message(seq, seq.tool_calls, how.tool_mode)
        logprobs = None
    elif seq.finish_reason == Finish.CACHE_THRESHOLD:
        # Refused before generating: no content at all, not even an empty one.
        message, logprobs = {"role": "assistant"}, None
    else:
        pieces = seq.output_pieces
        reasoning = None
        if seq.request.reasoning is not None and seq.reasoning_tokens:
            # vLLM's parsers: the reasoning part apart, content null when nothing follows.
            # include_reasoning false: generated and counted, but not shown, as in vLLM.
            reasoning = None if how.hide_reasoning else "".join(pieces[: seq.reasoning_tokens])
            pieces = pieces[seq.reasoning_tokens :]
        text = "".join(pieces)
        content: str | list[dict[str, object]] | None = text
        if seq.request.reasoning is not None and seq.reasoning_tokens and not text:
            content = None
        elif seq.request.with_image:
            content = [{"type": "text", "text": text}, image_block()]
        message = _message(content, reasoning)
        logprobs = how.logprobs.content(pieces, 0) if how.logprobs is not None else None
    return {
        "index": seq.index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish_reason(seq, how.tool_mode),
        "stop_reason": seq.stop_reason,
        "token_ids": seq.output_ids if how.token_ids else None,
        "routed_experts": None,
    }


def _tool_call_message(
    seq: Sequence, calls: list[ToolCallOutput], tool_mode: ToolMode
) -> dict[str, Any]:
    content: object = "" if tool_mode != "auto" else None
    if seq.request.with_image:
        content = [image_block()]
    message = _message(content)
    message["tool_calls"] = [
        {
            "id": TOOL_CALL_PREFIX + call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in calls
    ]
    return message
