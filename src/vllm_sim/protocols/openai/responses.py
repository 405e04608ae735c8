"""POST /v1/responses: the OpenAI Responses API on the shared engine and token stream.

A turn answers with one assistant message, or with exactly one function call when tools
are offered and no tool output is in the input yet, as an agent loop expects. Objects
and events carry the fields the official SDK reads (`sequence_number`, `output_index`,
`content_index`, item ids, `status: incomplete` when cut short) and the key set vLLM
sends; a stream always ends with `response.completed`, as vLLM's does. With the store on,
answers are kept and `previous_response_id` continues the conversation they ended.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal

import msgspec

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.toolcalls import ToolPlan
from vllm_sim.engine.request import JsonPlan, Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.frontend.capabilities import Capabilities
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Call, Endpoint, Options, Plan
from vllm_sim.frontend.envelope import encode_json
from vllm_sim.protocols.common.chat_messages import (
    ChatMessage,
    ContentBlock,
    FunctionCall,
    InputAudio,
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
from vllm_sim.protocols.common.logprobs import ChatLogprobs, check_logprobs_count
from vllm_sim.protocols.common.sampling import ReasoningEffort
from vllm_sim.protocols.common.tools import (
    parse_tool_choice,
    parse_tools,
    plan_tools,
    probe_schema,
    tool_candidates,
)
from vllm_sim.protocols.openai.response_store import ResponseStore, not_found

LOGPROBS_INCLUDE = "message.output_text.logprobs"
NO_STORE_FOR_BACKGROUND = (
    "This vLLM engine does not support `store=True` and therefore does not support the "
    "background mode. To enable these features, set the environment variable "
    "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."
)
ServiceTier = Literal["auto", "default", "flex", "scale", "priority"]
Truncation = Literal["auto", "disabled"]


# weakref: the conversation a request was planned with is kept beside its body (see
# Conversations), for as long as the body lives.
class ResponsesRequest(msgspec.Struct, weakref=True):
    input: str | list[Any] | msgspec.UnsetType | None = msgspec.UNSET
    model: str | None = None
    stream: bool | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    tools: list[Any] | None = None
    # Any: a wrong type gets the reference's own message from parse_tool_choice.
    tool_choice: Any | msgspec.UnsetType = msgspec.UNSET
    text: dict[str, Any] | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None
    ignore_eos: bool | None = None
    metadata: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    previous_response_id: str | None = None
    store: bool | None = None  # vLLM's default is true; it only counts with the store on
    background: bool | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = None
    prompt: Any = None  # prompt templates: refused, as vLLM does
    reasoning: dict[str, Any] | None = None
    include_reasoning: bool = True  # vLLM's extension: false keeps the reasoning item out
    service_tier: ServiceTier | None = None
    truncation: Truncation | None = None
    user: str | None = None


# ---------------------------------------------------------------- input items
def _fail(message: str, param: str) -> RequestError:
    return RequestError(400, message, param)


def _field(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key, "")
    if not isinstance(value, str):
        raise _fail(f"{where}.{key} must be a string", f"{where}.{key}")
    return value


def _content_block(part: object, where: str) -> ContentBlock:
    if not isinstance(part, dict):
        raise _fail("a content part must be an object", where)
    kind = part.get("type", "input_text")
    if kind in ("input_text", "output_text"):
        return ContentBlock("text", text=_field(part, "text", where))
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            raise _fail("input_image needs an image_url string", f"{where}.image_url")
        return ContentBlock("image_url", image_url=MediaUrl(url))
    if kind == "input_audio":
        data = _field(part, "data", where)
        return ContentBlock(
            "input_audio", input_audio=InputAudio(data, _field(part, "format", where))
        )
    raise _fail(f'unsupported input content type "{kind}"', f"{where}.type")


def _message(item: dict[str, Any], where: str) -> ChatMessage:
    role = _field(item, "role", where) or "user"
    content = item.get("content")
    if content is None or isinstance(content, str):
        return ChatMessage(role, content)
    if not isinstance(content, list):
        raise _fail("content must be a string or an array of parts", f"{where}.content")
    blocks = [_content_block(part, f"{where}.content[{j}]") for j, part in enumerate(content)]
    return ChatMessage(role, blocks)


def _input_item(item: object, where: str) -> ChatMessage | None:
    if not isinstance(item, dict):
        raise _fail("an input item must be an object", where)
    kind = item.get("type", "message")
    if kind == "message":
        return _message(item, where)
    if kind == "function_call":
        call_id = _field(item, "call_id", where) or _field(item, "id", where)
        call = FunctionCall(_field(item, "name", where), _field(item, "arguments", where))
        return ChatMessage("assistant", None, [ToolCall(call, call_id)])
    if kind == "reasoning":
        # An earlier answer's reasoning, handed back with its output: the history keeps it
        # out of the prompt, as the chat templates of reasoning models drop past thinking.
        if item.get("encrypted_content"):
            raise _fail("Encrypted content is not supported.", "input")
        return None
    if kind == "function_call_output":
        output = item.get("output", "")
        if isinstance(output, list):
            output = "\n".join(
                _content_block(part, f"{where}.output[{j}]").text or ""
                for j, part in enumerate(output)
            )
        if not isinstance(output, str):
            raise _fail("output must be a string or an array of parts", f"{where}.output")
        return ChatMessage("tool", output, tool_call_id=_field(item, "call_id", where))
    raise _fail(f'unsupported input item type "{kind}"', f"{where}.type")


def input_messages(raw: object) -> list[ChatMessage]:
    if raw is msgspec.UNSET or raw is None:
        raise _fail("input is required", "input")
    if isinstance(raw, str):
        return [ChatMessage("user", raw)]
    if not isinstance(raw, list):
        raise _fail("input must be a string or array of input items", "input")
    items = (_input_item(item, f"input[{i}]") for i, item in enumerate(raw))
    return [message for message in items if message is not None]


def _echo_text(messages: list[ChatMessage]) -> str:
    """What echo mode repeats: the last item's text; a function call as `name(arguments)`."""
    if not messages:
        return ""
    last = messages[-1]
    if last.tool_calls and last.content is None:
        call = last.tool_calls[0].function
        return f"{call.name}({call.arguments})"
    turns = read_conversation([last]).turns
    return turns[0].text


def _has_tool_output(raw: object) -> bool:
    return isinstance(raw, list) and any(
        isinstance(item, dict) and item.get("type") == "function_call_output" for item in raw
    )


# ---------------------------------------------------------------- request
def _tool_plan(ctx: ApiContext, body: ResponsesRequest) -> ToolPlan | None:
    for index, raw in enumerate(body.tools if isinstance(body.tools, list) else []):
        kind = raw.get("type", "function") if isinstance(raw, dict) else "function"
        if kind not in ("", "function"):
            # Built-in tools (web_search, file_search, ...) need a real backend.
            raise _fail(f'unsupported tool type "{kind}"', f"tools[{index}].type")
    tools = parse_tools(body.tools, ctx.settings.skip_tool_validation)
    choice = parse_tool_choice(body.tool_choice)
    if _has_tool_output(body.input):
        return None  # once a tool has answered, the turn is text
    candidates = tool_candidates(tools, choice)
    # Omitted and `auto` call a tool on the first tool turn; allowed_tools/custom stay random.
    raw_choice = body.tool_choice
    forced = choice.mode in ("required", "named") or raw_choice in (msgspec.UNSET, "auto")
    return plan_tools(candidates, forced, ctx.engine.view.synthesis, max_calls=1)


def _json_plan(ctx: ApiContext, raw: object) -> JsonPlan | None:
    """The JSON the output must be, if `text.format` asks for JSON."""
    fmt = raw.get("format") if isinstance(raw, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type", "text") == "text":
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return JsonPlan(None)
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise _fail("text.format.schema must be an object", "text.format.schema")
        probe_schema(schema, "text.format", "text.format.schema", ctx.engine.view.synthesis)
        return JsonPlan(schema)
    raise _fail(f"unknown text.format type: {kind}", "text.format.type")


def _check_stateful_options(store: ResponseStore, body: ResponsesRequest) -> None:
    """vLLM's rules on the options that need its store or its prompt templates."""
    if body.prompt is not None:
        raise _fail("prompt template is not supported", "prompt")
    if not body.background:
        return
    if body.store is False:
        raise _fail("background can only be used when `store` is true", "background")
    if not store.enabled:
        raise _fail(NO_STORE_FOR_BACKGROUND, "background")
    raise _fail(
        "background responses are not simulated: send the request without `background`",
        "background",
    )


def _prior_conversation(store: ResponseStore, previous_id: str | None) -> list[ChatMessage]:
    """The conversation `previous_response_id` ended: its messages, then its output."""
    if previous_id is None:
        return []
    entry = store.get(previous_id)
    if entry is None:
        raise not_found(previous_id)
    return entry.conversation


def _keeps(store: ResponseStore, body: ResponsesRequest) -> bool:
    """Whether this request's answer is stored (`store` defaults to true, as in vLLM)."""
    return store.enabled and body.store is not False


class Conversations:
    """The conversation each request to be stored was planned with, until its body is
    freed: planning and answering see the same body, but no other state in common."""

    def __init__(self) -> None:
        self._by_body: dict[int, list[ChatMessage]] = {}

    def remember(self, body: ResponsesRequest, conversation: list[ChatMessage]) -> None:
        key = id(body)
        self._by_body[key] = conversation
        weakref.finalize(body, self._by_body.pop, key, None)

    def recall(self, body: ResponsesRequest) -> list[ChatMessage]:
        return self._by_body.get(id(body), [])


class ResponsesEndpoint(Endpoint[ResponsesRequest]):
    decoder = msgspec.json.Decoder(ResponsesRequest)

    def __init__(self, path: str, capabilities: Capabilities, store: ResponseStore) -> None:
        super().__init__(path, capabilities)
        self._store = store  # finished answers, for previous_response_id and retrieval
        self._conversations = Conversations()

    def options(self, body: ResponsesRequest) -> Options:
        return Options(
            body.max_output_tokens,
            "max_output_tokens",
            stream=bool(body.stream),
            ignore_eos=bool(body.ignore_eos),
            logprobs=_logprob_alternatives(body),
            enable_thinking=_enable_thinking(body.reasoning),
        )

    def plan(self, ctx: ApiContext, body: ResponsesRequest) -> Plan:
        check_logprobs_count(body.top_logprobs, "top_logprobs")
        _check_stateful_options(self._store, body)
        prior = _prior_conversation(self._store, body.previous_response_id)
        json_plan = _json_plan(ctx, body.text)
        tools = _tool_plan(ctx, body)
        messages = input_messages(body.input)
        conversation = [*prior, *messages]
        read = read_conversation(conversation)
        effort = body.reasoning.get("effort") if body.reasoning is not None else None
        choices = TemplateChoices(
            tools=flat_function_tools(body.tools, "parameters"),
            chat_template_kwargs=thinking_kwargs(None, effort),
        )
        text = render(ctx.tokenizer, conversation, read, choices) if read.turns else ""
        # vLLM tokenizes a Responses prompt with the tokenizer's special tokens on top of
        # what the template wrote (a second beginning-of-sequence token, for some models).
        token_ids = ctx.tokenizer.encode(text, add_special_tokens=True) if read.turns else []
        if _keeps(self._store, body):
            self._conversations.remember(body, conversation)
        return Plan([Prompt(token_ids, _echo_text(messages))], tools, json_plan)

    def chunks(self, call: Call[ResponsesRequest]) -> ResponseEvents:
        return ResponseEvents(ResponseShape(call), self._keep)

    def answer(self, call: Call[ResponsesRequest]) -> dict[str, Any]:
        shape = ResponseShape(call)
        seq = call.stream.sequences[0]
        response = shape.response(seq, output_items(seq, shape))
        self._keep(call, seq, response)
        return response

    def _keep(self, call: Call[ResponsesRequest], seq: Sequence, response: dict[str, Any]) -> None:
        """Stores a finished response, with the conversation it continues."""
        if not _keeps(self._store, call.body):
            return
        conversation = [*self._conversations.recall(call.body), _as_message(seq)]
        self._store.put(response["id"], encode_json(response), conversation)


def _as_message(seq: Sequence) -> ChatMessage:
    """A finished turn as the message a later turn sees in its history."""
    if seq.tool_calls:
        call = seq.tool_calls[0]
        return ChatMessage(
            "assistant",
            None,
            [ToolCall(FunctionCall(call.name, call.arguments), f"call_{call.id}")],
        )
    # The reasoning stays out of the history, as vLLM's rebuilt conversation leaves it.
    return ChatMessage("assistant", "".join(seq.output_pieces[seq.reasoning_tokens :]))


# The efforts vLLM's chat body takes, which its Responses body takes too.
_EFFORTS: frozenset[str] = frozenset(ReasoningEffort.__args__)  # type: ignore[attr-defined]


def _enable_thinking(reasoning: dict[str, Any] | None) -> bool | None:
    """`reasoning.effort` turns thinking off ("none") or on (any other), as vLLM reads it."""
    effort = reasoning.get("effort") if reasoning is not None else None
    if effort is None:
        return None
    if not isinstance(effort, str) or effort not in _EFFORTS:
        allowed = ", ".join(sorted(_EFFORTS))
        raise _fail(f"reasoning.effort must be one of {allowed}", "reasoning.effort")
    return bool(effort != "none")


def _logprob_alternatives(body: ResponsesRequest) -> int | None:
    """Alternatives per token; None (no logprobs at all) unless `include` asks for them."""
    if body.include and LOGPROBS_INCLUDE in body.include:
        return max(body.top_logprobs or 0, 0)
    return None


# ---------------------------------------------------------------- objects
class ResponseShape:
    """What every response object of one request shares."""

    def __init__(self, call: Call[ResponsesRequest]) -> None:
        body = call.body
        self.call = call
        self.id = f"resp_{call.request_id}"
        self.message_id = f"msg_{call.request_id}"
        self.reasoning_id = f"rs_{call.request_id}"
        self.hide_reasoning = not body.include_reasoning
        self.model = call.model
        self.body = body
        alternatives = _logprob_alternatives(body)
        self.top_logprobs = alternatives
        self.logprobs = None if alternatives is None else ChatLogprobs(alternatives)
        self.created_at = int(call.stream.request.arrival_time)
        # vLLM answers the max_tokens it sampled with: the context's room when none is set.
        room = call.ctx.settings.max_model_len - call.stream.sequences[0].prompt_tokens
        asked = body.max_output_tokens
        self.max_output_tokens = room if asked is None else min(asked, room)

    def response(
        self, seq: Sequence | None, output: list[dict[str, Any]], status: str = ""
    ) -> dict[str, Any]:
        """The response object, with vLLM's keys in vLLM's order."""
        body = self.body
        incomplete = (
            seq is not None and seq.finish_reason == Finish.LENGTH and seq.tool_calls is None
        )
        status = status or ("incomplete" if incomplete else "completed")
        return {
            "id": self.id,
            "created_at": self.created_at,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.instructions,
            "metadata": body.metadata,
            "model": self.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": _or(body.parallel_tool_calls, True),
            "temperature": _or(body.temperature, 1.0),
            "tool_choice": _tool_choice_echo(body.tool_choice),
            "tools": body.tools or [],
            "top_p": _or(body.top_p, 1.0),
            "background": bool(body.background),
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": body.max_tool_calls,
            "previous_response_id": body.previous_response_id,
            "prompt": None,
            "reasoning": _reasoning_echo(body.reasoning),
            "service_tier": body.service_tier or "auto",
            "status": status,
            "text": body.text,
            "top_logprobs": self.top_logprobs,
            "truncation": body.truncation or "disabled",
            "usage": _usage(seq) if seq is not None and status != "in_progress" else None,
            "user": body.user,
            "input_messages": None,
            "output_messages": None,
            "frequency_penalty": _or(body.frequency_penalty, 0.0),
            "presence_penalty": _or(body.presence_penalty, 0.0),
            "kv_transfer_params": None,
            "ec_transfer_params": None,
        }


_REASONING_KEYS = ("context", "effort", "generate_summary", "mode", "summary")


def _reasoning_echo(reasoning: dict[str, Any] | None) -> dict[str, Any] | None:
    """The request's `reasoning` as vLLM echoes it: every key of its reasoning object."""
    if reasoning is None:
        return None
    return {key: reasoning.get(key) for key in _REASONING_KEYS}


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _tool_choice_echo(raw: object) -> object:
    return "auto" if raw is msgspec.UNSET or raw is None else raw


def _usage(seq: Sequence) -> dict[str, Any]:
    """vLLM's usage: the per-turn lists stay empty for a single-turn request, as there."""
    prompt, completion = seq.prompt_tokens, seq.completion_tokens
    reasoning = seq.reasoning_tokens if seq.request.reasoning is not None else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": seq.cached_tokens,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": min(reasoning, completion),
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": prompt + completion,
    }


def reasoning_item(shape: ResponseShape, text: str | None, status: str | None) -> dict[str, Any]:
    """vLLM's reasoning output item; `text` None while it is just opened."""
    content = None if text is None else [{"text": text, "type": "reasoning_text"}]
    return {
        "id": shape.reasoning_id,
        "summary": [],
        "type": "reasoning",
        "content": content,
        "encrypted_content": None,
        "status": status,
    }


def _text_part(seq: Sequence, shape: ResponseShape, first: int) -> dict[str, Any]:
    """The message's text part: the answer from token `first` on (after its reasoning)."""
    pieces = seq.output_pieces[first:]
    logprobs = shape.logprobs
    entries = None if logprobs is None else logprobs.entries(pieces, first)
    return {"type": "output_text", "text": "".join(pieces), "annotations": [], "logprobs": entries}


def output_item(seq: Sequence, shape: ResponseShape, done: bool) -> dict[str, Any]:
    """The turn's message or function call, finished (or, not `done`, just opened)."""
    status = "completed" if done else "in_progress"
    if seq.tool_calls:
        call = seq.tool_calls[0]
        return {
            "type": "function_call",
            "id": f"fc_{call.id}",
            "call_id": f"call_{call.id}",
            "name": call.name,
            "arguments": call.arguments if done else "",
            "status": status,
        }
    content = [_text_part(seq, shape, seq.reasoning_tokens)] if done else []
    # A message cut by max_output_tokens is still a completed item in vLLM; the response
    # says it is incomplete.
    return {
        "type": "message",
        "id": shape.message_id,
        "role": "assistant",
        "status": status,
        "content": content,
        "phase": None,
    }


def output_items(seq: Sequence, shape: ResponseShape) -> list[dict[str, Any]]:
    """A finished, not streamed turn's output: its reasoning item (with a reasoning parser,
    unless include_reasoning is false), then its message when any text follows, as vLLM."""
    split = seq.reasoning_tokens
    if not split:
        return [output_item(seq, shape, done=True)]
    items = []
    if not shape.hide_reasoning:
        items.append(reasoning_item(shape, "".join(seq.output_pieces[:split]), None))
    message = output_item(seq, shape, done=True)
    if message["content"][0]["text"]:
        items.append(message)
    return items


# ---------------------------------------------------------------- streaming
KeepResponse = Callable[[Call[ResponsesRequest], Sequence, dict[str, Any]], None]


class OpenItem(Enum):
    """The output item a stream is writing into."""

    NONE = 0
    REASONING = 1
    MESSAGE = 2  # a message or a function call


class ResponseEvents:
    """The Responses API's SSE events, numbered in order. A reasoning part opens its own
    item when its first token arrives and is closed when the first text token comes, which
    opens the message item after it, as vLLM's stream does."""

    def __init__(self, shape: ResponseShape, keep: KeepResponse) -> None:
        self._shape = shape
        self._keep = keep
        self._number = 0
        self._open = OpenItem.NONE
        self._index = -1  # the output index of the item opened last
        self._done: list[dict[str, Any]] = []  # the finished items, in output order

    def _event(self, name: str, payload: dict[str, Any]) -> bytes:
        payload = {"type": name, "sequence_number": self._number, **payload}
        self._number += 1
        return named_event(name, payload)

    def _where(self, seq: Sequence) -> dict[str, Any]:
        if seq.tool_calls:
            return {"item_id": f"fc_{seq.tool_calls[0].id}", "output_index": self._index}
        return {
            "item_id": self._shape.message_id,
            "output_index": self._index,
            "content_index": 0,
        }

    def _reasoning_where(self) -> dict[str, Any]:
        return {
            "content_index": 0,
            "item_id": self._shape.reasoning_id,
            "output_index": self._index,
        }

    def opening(self, seq: Sequence) -> bytes:
        in_progress = self._shape.response(None, [], "in_progress")
        parts = [
            self._event("response.created", {"response": in_progress}),
            self._event("response.in_progress", {"response": in_progress}),
        ]
        if not seq.reasoning_tokens:
            parts.append(self._open_message(seq))
        return b"".join(parts)

    def _open_message(self, seq: Sequence) -> bytes:
        self._index += 1
        self._open = OpenItem.MESSAGE
        item = output_item(seq, self._shape, done=False)
        parts = [
            self._event("response.output_item.added", {"output_index": self._index, "item": item})
        ]
        if not seq.tool_calls:
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            parts.append(
                self._event("response.content_part.added", {**self._where(seq), "part": part})
            )
        return b"".join(parts)

    def _open_reasoning(self) -> bytes:
        self._index += 1
        self._open = OpenItem.REASONING
        item = reasoning_item(self._shape, None, "in_progress")
        part = {"text": "", "type": "reasoning_text"}
        return self._event(
            "response.output_item.added", {"item": item, "output_index": self._index}
        ) + self._event("response.content_part.added", {**self._reasoning_where(), "part": part})

    def _close_reasoning(self, seq: Sequence) -> bytes:
        text = "".join(seq.output_pieces[: seq.reasoning_tokens])
        where = self._reasoning_where()
        item = reasoning_item(self._shape, text, "completed")
        self._done.append(item)
        self._open = OpenItem.NONE
        part = {"text": text, "type": "reasoning_text"}
        return b"".join(
            [
                self._event("response.reasoning_text.done", {**where, "text": text}),
                self._event("response.content_part.done", {**where, "part": part}),
                self._event(
                    "response.output_item.done", {"item": item, "output_index": self._index}
                ),
            ]
        )

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        if self._open is OpenItem.MESSAGE:
            return self._deltas(seq, start, end)
        split, pieces = seq.reasoning_tokens, seq.output_pieces
        parts = []
        for i in range(start, end):
            if not pieces[i] or (i < split and self._shape.hide_reasoning):
                continue  # no text (the end of sequence), or reasoning not shown
            if i < split:
                if self._open is not OpenItem.REASONING:
                    parts.append(self._open_reasoning())
                delta = {**self._reasoning_where(), "delta": pieces[i]}
                parts.append(self._event("response.reasoning_text.delta", delta))
                continue
            # The first text token: the reasoning item (if any) ends, the message opens and
            # takes the rest of this batch.
            if self._open is OpenItem.REASONING:
                parts.append(self._close_reasoning(seq))
            parts.append(self._open_message(seq))
            parts.append(self._deltas(seq, i, end))
            break
        return b"".join(parts)

    def _deltas(self, seq: Sequence, start: int, end: int) -> bytes:
        pieces = seq.output_pieces
        if seq.tool_calls:
            name = "response.function_call_arguments.delta"
            return b"".join(
                self._event(name, {**self._where(seq), "delta": pieces[i]})
                for i in range(start, end)
                if pieces[i]  # the end of sequence has no text
            )
        logprobs = self._shape.logprobs
        return b"".join(
            self._event(
                "response.output_text.delta",
                {
                    **self._where(seq),
                    "delta": pieces[i],
                    "logprobs": logprobs.entries([pieces[i]], i) if logprobs is not None else [],
                },
            )
            for i in range(start, end)
            if pieces[i]  # the end-of-sequence token has no text: no delta for it
        )

    def finish(self, seq: Sequence) -> bytes:
        parts = []
        if self._open is OpenItem.REASONING:
            parts.append(self._close_reasoning(seq))
        elif self._open is OpenItem.MESSAGE:
            parts.append(self._close_message(seq))
        shape = self._shape
        final = shape.response(seq, self._done)
        self._keep(shape.call, seq, final)
        # vLLM ends every stream with response.completed, an incomplete one too (its status
        # says so); the SDK's stream helper needs that event to hand out the response.
        parts.append(self._event("response.completed", {"response": final}))
        return b"".join(parts)

    def _close_message(self, seq: Sequence) -> bytes:
        item = output_item(seq, self._shape, done=True)
        self._done.append(item)
        where = self._where(seq)
        if seq.tool_calls:
            call = seq.tool_calls[0]
            args = {**where, "name": call.name, "arguments": call.arguments}
            parts = [self._event("response.function_call_arguments.done", args)]
        else:
            text_part = item["content"][0]
            done = {**where, "text": text_part["text"], "logprobs": text_part["logprobs"] or []}
            parts = [
                self._event("response.output_text.done", done),
                self._event("response.content_part.done", {**where, "part": text_part}),
            ]
        done_item = {"output_index": self._index, "item": item}
        parts.append(self._event("response.output_item.done", done_item))
        return b"".join(parts)

    def closing(self, stream: RequestStream) -> bytes:
        return b""  # the Responses stream ends with its completed event; no [DONE]

    def error(self, error: RequestError) -> bytes:
        """The API's `error` event (the SDK raises it); the stream then ends."""
        payload = {"code": str(error.status), "message": error.message, "param": error.param}
        return self._event("error", payload)
