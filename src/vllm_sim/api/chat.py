"""POST /v1/chat/completions: parse into a GenerationRequest, encode what the engine says."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.api.common import (
    ApiContext,
    check_output_limit,
    decode_body,
    unix_now,
    wait_for_result,
)
from vllm_sim.api.conversation import ChatMessage, mm_features, read_conversation
from vllm_sim.api.logprobs import chat_logprobs, check_logprobs_count
from vllm_sim.api.omni import image_block
from vllm_sim.api.streaming import OpenAIChunks, json_str, sse_events
from vllm_sim.api.tools import (
    parse_response_format,
    parse_tool_choice,
    parse_tools,
    plan_tools,
    probe_schema,
    tool_candidates,
)
from vllm_sim.api.transfer import (
    KvTransferParams,
    cache_threshold_forced,
    check_transfer,
    prefill_answer,
)
from vllm_sim.api.usage import usage_of
from vllm_sim.engine.core import CACHE_THRESHOLD
from vllm_sim.engine.errors import RequestError
from vllm_sim.engine.request import GenerationRequest, JsonPlan, Prompt, ToolPlan
from vllm_sim.engine.sequence import RequestStream, Sequence, ToolCallOutput
from vllm_sim.server.http import AnyResponse, HttpRequest, StreamingResponse, json_response


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class ChatRequest(msgspec.Struct):
    messages: list[ChatMessage]
    model: str | None = None
    # vLLM declares these Optional: an explicit null means the default.
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    ignore_eos: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: Any = None
    # UNSET (absent) means auto; an explicit null is an error, as in the reference.
    tool_choice: Any | msgspec.UnsetType = msgspec.UNSET
    response_format: Any = None
    cache_hit_threshold: float | None = None
    kv_transfer_params: KvTransferParams | None = None


_decoder = msgspec.json.Decoder(ChatRequest)


def _validate(body: ChatRequest) -> int | None:
    """Checks vLLM's and the reference's rules; returns the effective max tokens."""
    if body.n is not None and body.n < 1:
        raise RequestError(400, "n must be at least 1", param="n")
    max_tokens = body.max_completion_tokens
    field = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, field = body.max_tokens, "max_tokens"
    check_output_limit(max_tokens, field, body.ignore_eos)
    check_logprobs_count(body.top_logprobs, "top_logprobs")
    if body.top_logprobs and not body.logprobs:
        raise RequestError(
            400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
        )
    return max_tokens


async def handle(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _decoder)
    ctx.failures.check(request)
    request_id = ctx.request_id(request)
    model = ctx.resolve_model(body.model)
    tools = _tool_plan(ctx, body)
    max_tokens = _validate(body)
    check_transfer(body.kv_transfer_params, bool(body.stream))
    transfer = body.kv_transfer_params or KvTransferParams()
    prompt = _prompt(ctx, body.messages)
    generation = GenerationRequest(
        request_id=request_id,
        model=model,
        prompts=[prompt],
        n=body.n or 1,
        max_tokens=max_tokens,
        ignore_eos=bool(body.ignore_eos),
        arrival_time=unix_now(),
        with_image=ctx.images.wants_image(request),
        tools=tools,
        json_output=_json_plan(ctx, body),
        do_remote_prefill=transfer.do_remote_prefill,
        do_remote_decode=transfer.do_remote_decode,
        cache_hit_threshold=body.cache_hit_threshold,
        force_cache_threshold=cache_threshold_forced(request),
        max_tokens_field="max_completion_tokens"
        if body.max_completion_tokens is not None
        else "max_tokens",
    )
    stream = ctx.engine.submit(generation)
    headers = ctx.response_headers(request_id)
    top = (body.top_logprobs or 0) if body.logprobs else -1
    if body.stream:
        include_usage = body.stream_options is not None and bool(body.stream_options.include_usage)
        encoder = ChatChunks(stream, f"chatcmpl-{request_id}", model, top, include_usage)
        return StreamingResponse(sse_events(stream, request, encoder), headers=headers)
    await wait_for_result(stream, request)
    answer = _completion(stream, f"chatcmpl-{request_id}", model, top)
    if transfer.do_remote_decode:
        answer["kv_transfer_params"] = prefill_answer(
            stream.sequences[0], ctx.pod_ip, ctx.block_size
        )
    return json_response(answer, headers=headers)


def _prompt(ctx: ApiContext, messages: list[ChatMessage]) -> Prompt:
    """The rendered conversation's tokens; with the KV cache on, its media features too,
    so that blocks holding an image hash with that image."""
    conversation = read_conversation(messages)
    turns = conversation.turns
    echo_text = turns[-1].text if turns else ""
    text = ctx.tokenizer.render_chat(turns)
    if not (ctx.kv_enabled and conversation.media):
        return Prompt(ctx.tokenizer.encode(text), echo_text)
    ids, pieces = ctx.tokenizer.tokenize(text)
    return Prompt(ids, echo_text, mm_features(conversation, ctx.tokenizer, pieces))


def _tool_plan(ctx: ApiContext, body: ChatRequest) -> ToolPlan | None:
    """The tools this request may call; every tool is checked even when none may be."""
    if body.tools is None and body.tool_choice is msgspec.UNSET:
        return None  # the common case, answered without the parsers
    tools = parse_tools(body.tools, ctx.skip_tool_validation)
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
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(stream.request.arrival_time),
        "model": model,
        "choices": [_choice(seq, top) for seq in stream.sequences],
        "usage": usage_of(stream.sequences).openai_json(),
    }


def _choice(seq: Sequence, top: int) -> dict[str, Any]:
    if seq.tool_calls is not None:
        return _tool_call_choice(seq, seq.tool_calls)
    if seq.finish_reason == CACHE_THRESHOLD:
        # Refused before generating: no content at all, not even an empty one.
        message = {"role": "assistant"}
        return {
            "index": seq.index,
            "message": message,
            "logprobs": None,
            "finish_reason": CACHE_THRESHOLD,
        }
    pieces = seq.output_pieces
    content: str | list[dict[str, object]] = "".join(pieces)
    if seq.request.with_image:
        content = [{"type": "text", "text": content}, image_block()]
    return {
        "index": seq.index,
        "message": {"role": "assistant", "content": content},
        "logprobs": chat_logprobs(pieces, 0, top) if top >= 0 else None,
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

    def opening(self, seq: Sequence) -> bytes:
        if seq.finish_reason == CACHE_THRESHOLD:
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
                self._chunk(seq, _text_block_delta(pieces[i]), self._logprobs(pieces, i), b"null")
                for i in range(start, end)
            )
        if self._top < 0:
            head = self._head + str(seq.index).encode() + b',"delta":{"content":'
            tail = b'},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
            return b"".join([head + json_str(pieces[i]) + tail for i in range(start, end)])
        return b"".join(
            self._chunk(
                seq,
                b'{"content":' + json_str(pieces[i]) + b"}",
                msgspec.json.encode(chat_logprobs([pieces[i]], i, self._top)),
                b"null",
            )
            for i in range(start, end)
        )

    def _logprobs(self, pieces: list[str], i: int) -> bytes:
        if self._top < 0:
            return b"null"
        return msgspec.json.encode(chat_logprobs([pieces[i]], i, self._top))

    def finish(self, seq: Sequence) -> bytes:
        done = self._chunk(seq, b"{}", b"null", json_str(seq.finish_reason or "stop"))
        if not seq.request.with_image:
            return done
        image = self._chunk(seq, _IMAGE_DELTA, b"null", b"null")
        # The image chunk names its modality beside the choices, as omni servers do.
        return image.replace(b'"usage":null}', b'"usage":null,"modality":"image"}', 1) + done
