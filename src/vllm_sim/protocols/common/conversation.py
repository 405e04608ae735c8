"""Chat messages on the wire, flattened to prompt text, with their multimodal items.

Every protocol that takes a conversation (chat, render, tokenize) reads messages here, so
a content block means the same thing everywhere. Each media item becomes a short text in
the prompt (`image: <url>`, `audio: ...`, `video: <url>`), so it occupies real tokens that
render placeholders can point at.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Protocol

from vllm_sim.engine.tokenizer import ChatInput, ChatTurn, TemplateError, Tokenizer, fnv1a_32
from vllm_sim.errors import RequestError
from vllm_sim.protocols.common.chat_messages import ChatMessage, ContentBlock


@dataclass(frozen=True, slots=True)
class MediaItem:
    """One image, audio or video of a conversation, and where its text sits in its turn."""

    modality: str  # image | audio | video
    identifier: str  # the URL, or the audio data
    turn: int
    start: int  # character span of the item's text within the turn's text
    end: int


# Made once per chat request: a plain __init__ costs less than a frozen dataclass's, which
# sets each field through object.__setattr__ (and mypyc compiles it if this module is).
@dataclass(slots=True, init=False)
class Conversation:
    turns: list[ChatTurn]
    media: list[MediaItem]

    def __init__(self, turns: list[ChatTurn], media: list[MediaItem]) -> None:
        self.turns = turns
        self.media = media


_PREFIX = {"image": "img", "audio": "audio", "video": "video"}


def _media_of(block: ContentBlock, where: str) -> tuple[str, str, str] | None:
    """(modality, identifier, prompt text) of a media block; None for a text block."""
    kind = block.type
    if kind == "text":
        if block.text is None:
            raise RequestError(400, "a text content block needs `text`", f"{where}.text")
        return None
    if kind in ("image_url", "video_url", "audio_url"):
        media = getattr(block, kind)
        if media is None or not media.url:
            raise RequestError(400, f"a {kind} content block needs `{kind}.url`", f"{where}.{kind}")
        modality = kind.removesuffix("_url")
        return modality, media.url, f"{modality}: {media.url}"
    if kind == "input_audio":
        audio = block.input_audio
        if audio is None or not audio.data:
            raise RequestError(
                400, "an input_audio content block needs `input_audio.data`", f"{where}.input_audio"
            )
        # The data itself may be megabytes of base64: the prompt carries a short digest.
        return "audio", audio.data, f"audio: {fnv1a_32(audio.data):x}"
    raise RequestError(400, f"Unknown content part type: {kind}", f"{where}.type")


def _turn(message: ChatMessage, index: int, media: list[MediaItem]) -> ChatTurn:
    content = message.content
    text = ""
    if isinstance(content, str):
        text = content
    elif content is not None:
        parts: list[str] = []
        position = 0
        for j, block in enumerate(content):
            found = _media_of(block, f"messages[{index}].content[{j}]")
            part = (block.text or "") if found is None else found[2]
            if found is not None:
                media.append(MediaItem(found[0], found[1], index, position, position + len(part)))
            parts.append(part)
            position += len(part) + 1  # the "\n" joining blocks
        text = "\n".join(parts)
    for call in message.tool_calls or ():
        text += f"[{call.function.name}({call.function.arguments})]"
    return ChatTurn(message.role, text, message.tool_call_id)


def read_conversation(messages: list[ChatMessage]) -> Conversation:
    """Turns and media items; a malformed block is a 400 naming it."""
    media: list[MediaItem] = []
    turns = [_turn(message, i, media) for i, message in enumerate(messages)]
    return Conversation(turns, media)


def _template_content(message: ChatMessage) -> str | list[dict[str, str]] | None:
    """Content as a template reads it: text parts, each media item as its prompt text."""
    content = message.content
    if content is None or isinstance(content, str):
        return content
    parts: list[dict[str, str]] = []
    for index, block in enumerate(content):
        found = _media_of(block, f"content[{index}]")
        parts.append({"type": "text", "text": (block.text or "") if found is None else found[2]})
    return parts


def _arguments(raw: str) -> dict[str, Any]:
    """A tool call's arguments as an object, as templates expect them; text that is not
    a JSON object is an empty one (the call is history, and must not fail the turn)."""
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _template_message(message: ChatMessage) -> dict[str, Any]:
    shaped: dict[str, Any] = {"role": message.role, "content": _template_content(message)}
    if message.role == "assistant" and message.tool_calls:
        shaped["tool_calls"] = [
            {
                **({"id": call.id} if call.id is not None else {}),
                "type": "function",
                "function": {
                    "name": call.function.name,
                    "arguments": _arguments(call.function.arguments),
                },
            }
            for call in message.tool_calls
        ]
    if message.role == "tool" and message.tool_call_id is not None:
        shaped["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        shaped["name"] = message.name
    return shaped


def template_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """Function tools as a template receives them: every field of the function, absent
    ones as null (`strict` only when given), as vLLM passes them."""
    if tools is None:
        return None
    shaped: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            continue
        fields = {
            "name": function.get("name"),
            "description": function.get("description"),
            "parameters": function.get("parameters"),
        }
        if function.get("strict") is not None:
            fields["strict"] = function["strict"]
        shaped.append({"type": "function", "function": fields})
    return shaped


class ChatOptions(Protocol):
    """The fields of a body that decide how its chat is rendered (chat, tokenize, render)."""

    @property
    def tools(self) -> list[Any] | None: ...
    @property
    def add_generation_prompt(self) -> bool: ...
    @property
    def continue_final_message(self) -> bool: ...
    @property
    def chat_template(self) -> str | None: ...
    @property
    def chat_template_kwargs(self) -> dict[str, Any] | None: ...
    @property
    def documents(self) -> list[dict[str, str]] | None: ...


@dataclass(frozen=True, slots=True)
class TemplateChoices:
    """ChatOptions for protocols whose bodies have none of vLLM's template fields
    (Responses, Anthropic Messages): OpenAI-shaped tools, the defaults otherwise."""

    tools: list[Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    documents: list[dict[str, str]] | None = None


def thinking_kwargs(kwargs: dict[str, Any] | None, effort: object) -> dict[str, Any] | None:
    """chat_template_kwargs as vLLM completes them from a reasoning effort: unless they set
    `enable_thinking` themselves, any effort turns thinking on, and "none" off."""
    if effort is None or (kwargs is not None and "enable_thinking" in kwargs):
        return kwargs
    return {**(kwargs or {}), "enable_thinking": effort != "none"}


def flat_function_tools(tools: object, schema_key: str) -> list[Any] | None:
    """Tools written flat (`name`, `description` and the schema under `schema_key`, as
    Responses and Anthropic write them) in chat's nested form."""
    if not isinstance(tools, list):
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": tool.get("name"),
                "description": tool.get("description"),
                "parameters": tool.get(schema_key),
            },
        }
        for tool in tools
        if isinstance(tool, dict)
    ]


def chat_input(
    tokenizer: Tokenizer, messages: list[ChatMessage], conversation: Conversation, body: ChatOptions
) -> ChatInput:
    """The conversation as the tokenizer reads it: a chat template reads the messages in
    OpenAI's shape, the simulated tokenizer only the flattened turns (the messages are then
    not built, which keeps its request path short)."""
    shaped = [_template_message(m) for m in messages] if tokenizer.uses_chat_template else []
    return ChatInput(
        conversation.turns,
        shaped,
        tools=template_tools(body.tools) if tokenizer.uses_chat_template else None,
        add_generation_prompt=body.add_generation_prompt,
        continue_final_message=body.continue_final_message,
        template=body.chat_template,
        template_kwargs=body.chat_template_kwargs or {},
        documents=body.documents,
    )


def render(
    tokenizer: Tokenizer, messages: list[ChatMessage], conversation: Conversation, body: ChatOptions
) -> str:
    """The prompt text of a conversation; a template that fails is the request's 400."""
    try:
        return tokenizer.render_chat(chat_input(tokenizer, messages, conversation, body))
    except TemplateError as error:
        raise RequestError(400, str(error), "messages") from None


def media_hash(item: MediaItem, modality_index: int) -> str:
    return f"sim_{_PREFIX[item.modality]}_{modality_index}_{fnv1a_32(item.identifier):x}"


def mm_features(
    conversation: Conversation, text: str, pieces: list[str]
) -> dict[str, dict[str, list[object]]] | None:
    """Render features: per modality, each item's hash, the tokens it occupies, its kwargs.

    `pieces` are the tokens of the rendered conversation `text`; they join back to it, so
    an item's prompt text, found in order in the rendering, maps onto the tokens that
    spell it. An item the template did not keep verbatim has no placeholder."""
    if not conversation.media:
        return None
    token_at: list[int] = []  # token index of every character of the rendered text
    for index, piece in enumerate(pieces):
        token_at += [index] * len(piece)
    hashes: dict[str, list[object]] = {}
    placeholders: dict[str, list[object]] = {}
    kwargs: dict[str, list[object]] = {}
    position = 0
    for item in conversation.media:
        needle = conversation.turns[item.turn].text[item.start : item.end]
        found = text.find(needle, position)
        if found < 0:
            continue
        position = found + len(needle)
        seen = hashes.setdefault(item.modality, [])
        digest = media_hash(item, len(seen))
        seen.append(digest)
        first, last = token_at[found], token_at[position - 1]
        span = {"offset": first, "length": last - first + 1}
        placeholders.setdefault(item.modality, []).append(span)
        kwargs.setdefault(item.modality, []).append(base64.b64encode(digest.encode()).decode())
    return {"mm_hashes": hashes, "mm_placeholders": placeholders, "kwargs_data": kwargs}
