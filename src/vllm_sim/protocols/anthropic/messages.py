"""POST /v1/messages: the Anthropic Messages API on the shared engine and token stream.

Requests become the same conversation a chat request does (system, text, images, tool uses
and tool results), and answers take Anthropic's shapes, events and error envelope, so the
official `anthropic` SDK and its stream helpers work unchanged.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

import msgspec

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.stops import StopRules
from vllm_sim.engine.generation.toolcalls import ToolCallOutput, ToolPlan
from vllm_sim.engine.request import Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import decode_body
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Call, Endpoint, Options, Plan
from vllm_sim.http.messages import AnyResponse, HttpRequest
from vllm_sim.protocols.common.answers import json_response
from vllm_sim.protocols.common.chat_messages import (
    ChatMessage,
    ContentBlock,
    FunctionCall,
    MediaUrl,
    ToolCall,
)
from vllm_sim.protocols.common.conversation import (
    TemplateChoices,
    flat_function_tools,
    read_conversation,
    render,
    thinking_kwargs,
)
from vllm_sim.protocols.common.encoding import named_event
from vllm_sim.protocols.common.tools import (
    Tool,
    ToolChoice,
    ToolChoiceMode,
    parse_tools,
    plan_tools,
    tool_candidates,
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# A cache-threshold refusal reads as max_tokens: output stopped before it began.
_STOP_REASONS = {
    Finish.TOOL_CALLS: "tool_use",
    Finish.LENGTH: "max_tokens",
    Finish.CACHE_THRESHOLD: "max_tokens",
}


class MessagesRequest(msgspec.Struct):
    model: str | None = None
    messages: list[Any] | None = None  # each message is checked as it is converted
    max_tokens: int | None = None
    system: str | list[Any] | None = None
    stream: bool | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    ignore_eos: bool | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    thinking: Any = None  # checked by _thinking: enabled (with a budget), disabled, adaptive
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's extension, as in chat


class CountTokensRequest(msgspec.Struct):
    """POST /v1/messages/count_tokens: a Messages request without the generation knobs."""

    model: str | None = None
    messages: list[Any] | None = None
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None


def error_payload(error: RequestError) -> dict[str, Any]:
    """Anthropic's error envelope; the SDK picks its exception class from the status."""
    kind = _ERROR_TYPES.get(
        error.status, "api_error" if error.status >= 500 else "invalid_request_error"
    )
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def _fail(message: str, param: str) -> RequestError:
    return RequestError(400, message, param)


# ---------------------------------------------------------------- conversion
def _text_of(blocks: object, where: str) -> str:
    """Text blocks joined by newlines (system prompts and tool results)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise _fail(f"{where} must be a string or an array of content blocks", where)
    texts = []
    for j, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise _fail("a content block must be an object", f"{where}[{j}]")
        if block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise _fail("a text block needs a string `text`", f"{where}[{j}].text")
            texts.append(text)
    return "\n".join(texts)


def _image(block: dict[str, Any], where: str) -> ContentBlock:
    source = block.get("source")
    if not isinstance(source, dict):
        raise _fail("image content block is missing required 'source' field", f"{where}.source")
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
        return ContentBlock("image_url", image_url=MediaUrl(url))
    link = source.get("url")
    if not isinstance(link, str) or not link:
        raise _fail("image source needs `data` (base64) or a `url`", f"{where}.source")
    return ContentBlock("image_url", image_url=MediaUrl(link))


def _tool_use(block: dict[str, Any], where: str) -> ToolCall:
    arguments = block.get("input") or {}
    if not isinstance(arguments, dict):
        raise _fail("tool_use input must be an object", f"{where}.input")
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise _fail("tool_use needs a name", f"{where}.name")
    text = json.dumps(arguments, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return ToolCall(FunctionCall(name, text), str(block.get("id", "")))


def _message(raw: object, where: str) -> list[ChatMessage]:
    """One Anthropic message as chat messages: itself, then one per tool result."""
    if not isinstance(raw, dict):
        raise _fail("a message must be an object", where)
    role, content = raw.get("role"), raw.get("content")
    if not isinstance(role, str):
        raise _fail("a message needs a role", f"{where}.role")
    if isinstance(content, str):
        return [ChatMessage(role, content)] if content else []
    if not isinstance(content, list):
        raise _fail("content must be a string or an array of content blocks", f"{where}.content")
    blocks: list[ContentBlock] = []
    calls: list[ToolCall] = []
    results: list[ChatMessage] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(block, dict):
            raise _fail("a content block must be an object", at)
        kind = block.get("type")
        if kind == "text":
            blocks.append(ContentBlock("text", text=_text_of([block], at)))
        elif kind == "image":
            blocks.append(_image(block, at))
        elif kind == "tool_use":
            calls.append(_tool_use(block, at))
        elif kind == "tool_result":
            text = _text_of(block.get("content", ""), f"{at}.content")
            results.append(
                ChatMessage("tool", text, tool_call_id=str(block.get("tool_use_id", "")))
            )
        # Documents, thinking and other blocks carry nothing the simulator reads.
    own = [ChatMessage(role, blocks or None, calls or None)] if blocks or calls else []
    return own + results


def _messages(body: MessagesRequest | CountTokensRequest) -> list[ChatMessage]:
    converted: list[ChatMessage] = []
    if body.system is not None:
        system = _text_of(body.system, "system")
        if system:
            converted.append(ChatMessage("system", system))
    if body.messages is not None and not isinstance(body.messages, list):
        raise _fail("messages must be an array", "messages")
    for i, raw in enumerate(body.messages or []):
        converted += _message(raw, f"messages[{i}]")
    if not converted:
        raise _fail("messages must not be empty", "messages")
    return converted


def _tool_choice(raw: object) -> ToolChoice:
    if raw is None:
        return ToolChoice("auto")
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "tool":
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str) or not name:
            raise _fail("tool_choice of type 'tool' requires a non-empty 'name'", "tool_choice")
        return ToolChoice("named", name)
    modes: dict[str, ToolChoiceMode] = {"auto": "auto", "any": "required", "none": "none"}
    if not isinstance(kind, str) or kind not in modes:
        raise _fail(f"unknown tool_choice type: {kind}", "tool_choice.type")
    return ToolChoice(modes[kind])


def _tools(
    ctx: ApiContext, body: MessagesRequest | CountTokensRequest
) -> tuple[list[Tool] | None, ToolChoice]:
    """The request's tools (Anthropic's `input_schema` read as parameters) and choice."""
    raw_tools = body.tools
    if raw_tools is not None and not isinstance(raw_tools, list):
        raise _fail("tools must be an array", "tools")
    flat = [
        {**tool, "type": "function", "parameters": tool.get("input_schema")}
        if isinstance(tool, dict)
        else tool
        for tool in raw_tools or []
    ]
    skip = ctx.settings.skip_tool_validation
    tools = parse_tools(flat if raw_tools is not None else None, skip)
    return tools, _tool_choice(body.tool_choice)


MIN_THINKING_BUDGET = 1024  # Anthropic's (and vLLM's) smallest budget_tokens
ThinkingType = Literal["enabled", "disabled", "adaptive"]
_THINKING_TYPES: frozenset[str] = frozenset(ThinkingType.__args__)  # type: ignore[attr-defined]


def _thinking(options: Options, body: MessagesRequest) -> None:
    """What `thinking` and `chat_template_kwargs.enable_thinking` set, as vLLM maps them:
    enabled caps the reasoning at budget_tokens, disabled turns thinking off (a reasoning
    effort of "none"), adaptive changes nothing."""
    kwargs = body.chat_template_kwargs
    flag = kwargs.get("enable_thinking") if kwargs is not None else None
    if isinstance(flag, bool):
        options.enable_thinking = flag
    raw = body.thinking
    if raw is None:
        return
    kind = raw.get("type") if isinstance(raw, dict) else None
    if not isinstance(kind, str) or kind not in _THINKING_TYPES:
        allowed = ", ".join(sorted(_THINKING_TYPES))
        raise _fail(f"thinking.type must be one of {allowed}", "thinking.type")
    if kind == "disabled" and options.enable_thinking is None:
        options.enable_thinking = False
    elif kind == "enabled":
        options.reasoning_budget = _thinking_budget(raw.get("budget_tokens"), options.max_tokens)


def _thinking_budget(budget: object, max_tokens: int | None) -> int:
    """thinking.budget_tokens, checked as vLLM checks it: at least 1024, below max_tokens."""
    param = "thinking.budget_tokens"
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise _fail("thinking.budget_tokens must be an integer", param)
    if budget < MIN_THINKING_BUDGET:
        raise _fail(f"Input should be greater than or equal to {MIN_THINKING_BUDGET}", param)
    if max_tokens is not None and budget >= max_tokens:
        raise _fail("Value error, thinking.budget_tokens must be less than max_tokens", param)
    return budget


def _tool_plan(ctx: ApiContext, body: MessagesRequest) -> ToolPlan | None:
    tools, choice = _tools(ctx, body)
    candidates = tool_candidates(tools, choice)
    forced = choice.mode in ("required", "named")
    max_calls = 1 if choice.mode == "named" else None
    return plan_tools(candidates, forced, ctx.engine.view.synthesis, max_calls)


# ---------------------------------------------------------------- endpoint
class MessagesEndpoint(Endpoint[MessagesRequest]):
    decoder = msgspec.json.Decoder(MessagesRequest)

    def options(self, body: MessagesRequest) -> Options:
        if body.max_tokens is None:
            raise _fail("max_tokens is required", "max_tokens")
        stream, ignore_eos = bool(body.stream), bool(body.ignore_eos)
        options = Options(body.max_tokens, "max_tokens", stream=stream, ignore_eos=ignore_eos)
        strings = tuple(text for text in body.stop_sequences or () if text)
        if strings:
            options.stops = StopRules(strings)
        options.greedy = body.temperature == 0
        _thinking(options, body)
        return options

    def plan(self, ctx: ApiContext, body: MessagesRequest) -> Plan:
        messages = _messages(body)
        tools = _tool_plan(ctx, body)
        conversation = read_conversation(messages)
        text = render(ctx.tokenizer, messages, conversation, _template_choices(body))
        return Plan([Prompt(ctx.tokenizer.encode(text), conversation.turns[-1].text)], tools)

    def chunks(self, call: Call[MessagesRequest]) -> MessageEvents:
        return MessageEvents(f"msg_{call.request_id}", call.model)

    def answer(self, call: Call[MessagesRequest]) -> dict[str, Any]:
        seq = call.stream.sequences[0]
        message_id = f"msg_{call.request_id}"
        message = message_object(message_id, call.model, seq, _content(seq), stop_reason(seq))
        message["usage"]["output_tokens"] = seq.completion_tokens
        return message

    def error_body(self, error: RequestError) -> bytes:
        return msgspec.json.encode(error_payload(error))


_count_decoder = msgspec.json.Decoder(CountTokensRequest)


def count_tokens(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    """POST /v1/messages/count_tokens: the input tokens /v1/messages would count for the same
    body (same conversion and rendering), in vLLM's answer shape."""
    body = decode_body(request.body, _count_decoder)
    if not body.model:
        raise _fail("model is required", "model")  # vLLM requires it here, unlike /v1/messages
    ctx.resolve_model(body.model)
    if body.messages is None:
        raise _fail("messages is required", "messages")
    try:
        messages = _messages(body)
        conversation = read_conversation(messages)
        _tools(ctx, body)  # checked as /v1/messages checks them
    except RecursionError:
        raise RequestError(400, "The request is nested too deeply") from None
    text = render(ctx.tokenizer, messages, conversation, _template_choices(body))
    count = len(ctx.tokenizer.encode(text))
    return json_response(
        {"input_tokens": count, "context_management": {"original_input_tokens": count}}
    )


def _template_choices(body: MessagesRequest | CountTokensRequest) -> TemplateChoices:
    """The chat template's options: the request's tools, in chat's form, and for a message
    its chat_template_kwargs, with thinking off when `thinking` disables it (vLLM turns that
    into a reasoning effort of "none")."""
    tools = flat_function_tools(body.tools, "input_schema")
    if not isinstance(body, MessagesRequest):
        return TemplateChoices(tools=tools)
    thinking = body.thinking
    disabled = isinstance(thinking, dict) and thinking.get("type") == "disabled"
    kwargs = thinking_kwargs(body.chat_template_kwargs, "none" if disabled else None)
    return TemplateChoices(tools=tools, chat_template_kwargs=kwargs)


def stop_reason(seq: Sequence) -> str:
    if isinstance(seq.stop_reason, str):
        return "stop_sequence"
    reason = seq.finish_reason
    return "end_turn" if reason is None else _STOP_REASONS.get(reason, "end_turn")


def stop_sequence(seq: Sequence) -> str | None:
    """The stop sequence that ended the answer, if one did."""
    return seq.stop_reason if isinstance(seq.stop_reason, str) else None


def message_object(
    message_id: str, model: str, seq: Sequence, content: list[Any], reason: str | None
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": reason,
        "stop_sequence": stop_sequence(seq) if reason is not None else None,
        "usage": {
            "input_tokens": seq.prompt_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": seq.cached_tokens,
            "output_tokens": 0,
        },
    }


def _signature() -> str:
    """A thinking block's signature: vLLM signs nothing, it sends a fresh uuid4 in hex."""
    return uuid.uuid4().hex


def _content(seq: Sequence) -> list[dict[str, Any]]:
    if seq.tool_calls is None:
        split = seq.reasoning_tokens
        text = "".join(seq.output_pieces[split:])
        if not split:
            return [{"type": "text", "text": text}]
        # vLLM: a thinking block, then a text block only when text follows it.
        thinking = "".join(seq.output_pieces[:split])
        blocks = [{"type": "thinking", "thinking": thinking, "signature": _signature()}]
        return [*blocks, {"type": "text", "text": text}] if text else blocks
    return [
        {
            "type": "tool_use",
            "id": f"toolu_{c.id}",
            "name": c.name,
            "input": json.loads(c.arguments),
        }
        for c in seq.tool_calls
    ]


# ---------------------------------------------------------------- streaming
class MessageEvents:
    """Anthropic's stream: message_start, one content block per thinking part, text or tool
    call, the message_delta with the stop reason and usage, message_stop. A thinking block
    ends with its signature_delta, and the text block after it opens at the first text
    token, as vLLM streams them."""

    def __init__(self, message_id: str, model: str) -> None:
        self._id = message_id
        self._model = model
        self._block = 0  # the index of the open content block (-1: none is open)
        self._thinking = False  # the open block is the thinking block

    def opening(self, seq: Sequence) -> bytes:
        start = named_event(
            "message_start",
            {
                "type": "message_start",
                "message": message_object(self._id, self._model, seq, [], None),
            },
        )
        ping = named_event("ping", {"type": "ping"})
        if seq.tool_calls is not None:
            return start + ping
        if seq.reasoning_tokens:
            self._thinking = True
            return start + _block_start(0, {"type": "thinking", "thinking": ""}) + ping
        return start + _block_start(0, {"type": "text", "text": ""}) + ping

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        if seq.tool_calls is not None:
            return _tool_deltas(seq.tool_calls, seq.output_pieces, start, end)
        pieces, split = seq.output_pieces, seq.reasoning_tokens
        parts = []
        for i in range(start, end):
            if not pieces[i]:
                continue  # the end-of-sequence token has no text: no delta for it
            if i < split:
                parts.append(_delta(0, {"type": "thinking_delta", "thinking": pieces[i]}))
                continue
            if self._thinking:
                parts.append(self._end_thinking())
                self._block = 1
                parts.append(_block_start(1, {"type": "text", "text": ""}))
            parts.append(_delta(self._block, {"type": "text_delta", "text": pieces[i]}))
        return b"".join(parts)

    def _end_thinking(self) -> bytes:
        """The thinking block's signature, then its end."""
        self._thinking = False
        self._block = -1
        signature = _delta(0, {"type": "signature_delta", "signature": _signature()})
        return signature + _block_stop(0)

    def finish(self, seq: Sequence) -> bytes:
        if seq.tool_calls:
            end = _block_stop(len(seq.tool_calls) - 1)
        elif self._thinking:
            end = self._end_thinking()
        else:
            end = _block_stop(self._block) if self._block >= 0 else b""
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(seq), "stop_sequence": stop_sequence(seq)},
            "usage": {"input_tokens": seq.prompt_tokens, "output_tokens": seq.completion_tokens},
        }
        return (
            end
            + named_event("message_delta", delta)
            + named_event("message_stop", {"type": "message_stop"})
        )

    def closing(self, stream: RequestStream) -> bytes:
        return b""

    def error(self, error: RequestError) -> bytes:
        return named_event("error", error_payload(error))


def _tool_deltas(calls: list[ToolCallOutput], pieces: list[str], start: int, end: int) -> bytes:
    """A tool_use block per call, its arguments streamed as input_json_delta."""
    parts = []
    for i in range(start, min(end, calls[-1].end)):  # the end of sequence says nothing
        index = next(k for k, call in enumerate(calls) if call.start <= i < call.end)
        call = calls[index]
        if i == call.start:
            if index:
                parts.append(_block_stop(index - 1))
            block = {"type": "tool_use", "id": f"toolu_{call.id}", "name": call.name, "input": {}}
            parts.append(_block_start(index, block))
        parts.append(_delta(index, {"type": "input_json_delta", "partial_json": pieces[i]}))
    return b"".join(parts)


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    payload = {"type": "content_block_start", "index": index, "content_block": block}
    return named_event("content_block_start", payload)


def _block_stop(index: int) -> bytes:
    return named_event("content_block_stop", {"type": "content_block_stop", "index": index})


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    payload = {"type": "content_block_delta", "index": index, "delta": delta}
    return named_event("content_block_delta", payload)
