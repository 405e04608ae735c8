"""POST /v1/chat/completions: parse into a GenerationRequest, encode what the engine says."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.api.context import ApiContext
from vllm_sim.api.conversation import ChatMessage, mm_features, read_conversation
from vllm_sim.api.endpoint import Call, Endpoint, Options, Plan
from vllm_sim.api.logprobs import ChatLogprobs, check_logprobs_count
from vllm_sim.api.omni import image_block
from vllm_sim.api.sampling import ChatSampling, check_sampling
from vllm_sim.api.streaming import OpenAIChunks, encoded_choices, json_str, openai_object
from vllm_sim.api.tools import (
    parse_response_format,
    parse_tool_choice,
    parse_tools,
    plan_tools,
    probe_schema,
    tool_candidates,
)
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.toolcalls import ToolCallOutput, ToolPlan
from vllm_sim.engine.request import JsonPlan, Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError


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
        check_sampling(body, options)
        return options

    def plan(self, ctx: ApiContext, body: ChatRequest) -> Plan:
        check_logprobs_count(body.top_logprobs, "top_logprobs")
        if body.top_logprobs and not body.logprobs:
            raise RequestError(
                400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
            )
        tools = _tool_plan(ctx, body)
        return Plan([_prompt(ctx, body.messages)], tools, _json_plan(ctx, body))

    def chunks(self, call: Call[ChatRequest]) -> ChatChunks:
        usage = call.options.include_usage
        return ChatChunks(call.stream, f"chatcmpl-{call.request_id}", call.model, _top(call), usage)

    def answer(self, call: Call[ChatRequest]) -> dict[str, Any]:
        return _completion(call.stream, f"chatcmpl-{call.request_id}", call.model, _top(call))


def _top(call: Call[ChatRequest]) -> int:
    """How many alternatives each token's logprobs list; -1 for no logprobs at all."""
    body = call.body
    return (body.top_logprobs or 0) if body.logprobs else -1


def _prompt(ctx: ApiContext, messages: list[ChatMessage]) -> Prompt:
    """The rendered conversation's tokens; with the KV cache on, its media features too,
    so that blocks holding an image hash with that image."""
    conversation = read_conversation(messages)
    turns = conversation.turns
    echo_text = turns[-1].text if turns else ""
    text = ctx.tokenizer.render_chat(turns)
    if not (ctx.settings.kv_enabled and conversation.media):
        return Prompt(ctx.tokenizer.encode(text), echo_text)
    ids, pieces = ctx.tokenizer.tokenize(text)
    return Prompt(ids, echo_text, mm_features(conversation, ctx.tokenizer, pieces))


def _tool_plan(ctx: ApiContext, body: ChatRequest) -> ToolPlan | None:
    """The tools this request may call; every tool is checked even when none may be."""
    if body.tools is None and body.tool_choice is msgspec.UNSET:
        return None  # the common case, answered without the parsers
    tools = parse_tools(body.tools, ctx.settings.skip_tool_validation)
    choice = parse_tool_choice(body.tool_choice)
    candidates = tool_candidates(tools, choice)
    forced = choice.mode in ("required", "named")
    return plan_tools(candidates, forced, ctx.engine.content.synthesis)


def _json_plan(ctx: ApiContext, body: ChatRequest) -> JsonPlan | None:
    if body.response_format is None:
        return None
    response_format = parse_response_format(body.response_format)
    if response_format is None or response_format.kind == "text":
        return None
    if response_format.schema is not None:
        settings = ctx.engine.content.synthesis
        probe_schema(response_format.schema, "response_format", "response_format", settings)
    return JsonPlan(response_format.schema)


def _completion(stream: RequestStream, rid: str, model: str, top: int) -> dict[str, Any]:
    logprobs = ChatLogprobs(top) if top >= 0 else None
    choices = encoded_choices(stream, _choice, logprobs)
    return openai_object(stream, rid, "chat.completion", model, choices)


def _choice(seq: Sequence, logprobs: ChatLogprobs | None) -> dict[str, Any]:
    if seq.tool_calls is not None:
        return _tool_call_choice(seq, seq.tool_calls)
    if seq.finish_reason == Finish.CACHE_THRESHOLD:
        # Refused before generating: no content at all, not even an empty one.
        message = {"role": "assistant"}
        return {
            "index": seq.index,
            "message": message,
            "logprobs": None,
            "finish_reason": Finish.CACHE_THRESHOLD,
        }
    pieces = seq.output_pieces
    content: str | list[dict[str, object]] = "".join(pieces)
    if seq.request.with_image:
        content = [{"type": "text", "text": content}, image_block()]
    return {
        "index": seq.index,
        "message": {"role": "assistant", "content": content},
        "logprobs": logprobs.content(pieces, 0) if logprobs is not None else None,
        "finish_reason": seq.finish_reason,
    }


def _tool_call_choice(seq: Sequence, calls: list[ToolCallOutput]) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": [image_block()] if seq.request.with_image else None,
        "tool_calls": [
            {
                "id": TOOL_CALL_PREFIX + call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ],
    }
    return {
        "index": seq.index,
        "message": message,
        "logprobs": None,
        "finish_reason": seq.finish_reason,
    }


TOOL_CALL_PREFIX = "chatcmpl-tool-"
_IMAGE_DELTA = msgspec.json.encode({"content": [image_block()]})


def _tool_call_delta(calls: list[ToolCallOutput], i: int, piece: str) -> bytes:
    """One argument token of a call; its first also names the call, as the OpenAI SDK's
    stream helper expects (it concatenates repeated string fields)."""
    index = next(k for k, call in enumerate(calls) if call.start <= i < call.end)
    call = calls[index]
    entry: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
    if i == call.start:
        entry = {
            "index": index,
            "id": TOOL_CALL_PREFIX + call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": piece},
        }
    return msgspec.json.encode({"tool_calls": [entry]})


def _text_block_delta(piece: str) -> bytes:
    return b'{"content":[{"type":"text","text":' + json_str(piece) + b"}]}"


class ChatChunks(OpenAIChunks):
    """Chat completion chunks, spliced from precomputed bytes around each token."""

    OBJECT = "chat.completion.chunk"
    BODY_KEY = b'"delta"'

    def __init__(
        self, stream: RequestStream, rid: str, model: str, top: int, include_usage: bool
    ) -> None:
        super().__init__(stream, rid, model, top, include_usage)
        self._logprobs = ChatLogprobs(top) if top >= 0 else None

    def opening(self, seq: Sequence) -> bytes:
        if seq.finish_reason == Finish.CACHE_THRESHOLD:
            return b""  # a refused choice is one finish chunk, nothing before it
        return self._chunk(seq, b'{"role":"assistant","content":""}', b"null", b"null")

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        pieces = seq.output_pieces
        if seq.tool_calls is not None:
            return b"".join(
                self._chunk(seq, _tool_call_delta(seq.tool_calls, i, pieces[i]), b"null", b"null")
                for i in range(start, end)
            )
        if seq.request.with_image:
            # An omni answer streams its text as content blocks.
            return b"".join(
                self._chunk(
                    seq, _text_block_delta(pieces[i]), self._token_logprobs(pieces, i), b"null"
                )
                for i in range(start, end)
            )
        if self._logprobs is None:
            head = self._head + str(seq.index).encode() + b',"delta":{"content":'
            tail = b'},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
            return b"".join([head + json_str(pieces[i]) + tail for i in range(start, end)])
        return b"".join(
            self._chunk(
                seq,
                b'{"content":' + json_str(pieces[i]) + b"}",
                self._token_logprobs(pieces, i),
                b"null",
            )
            for i in range(start, end)
        )

    def _token_logprobs(self, pieces: list[str], i: int) -> bytes:
        if self._logprobs is None:
            return b"null"
        return b'{"content":[' + self._logprobs.entry(pieces[i], i) + b"]}"

    def finish(self, seq: Sequence) -> bytes:
        done = self._chunk(seq, b"{}", b"null", json_str(seq.finish_reason or Finish.STOP))
        if not seq.request.with_image:
            return done
        image = self._chunk(seq, _IMAGE_DELTA, b"null", b"null")
        # The image chunk names its modality beside the choices, as omni servers do.
        return image.replace(b'"usage":null}', b'"usage":null,"modality":"image"}', 1) + done
