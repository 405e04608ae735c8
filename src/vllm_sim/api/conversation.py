"""Chat messages on the wire, flattened to prompt text, with their multimodal items.

Every protocol that takes a conversation (chat, render, tokenize) reads messages here, so
a content block means the same thing everywhere. Each media item becomes a short text in
the prompt (`image: <url>`, `audio: ...`, `video: <url>`), so it occupies real tokens that
render placeholders can point at.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import msgspec

from vllm_sim.engine.tokenizer import ChatTurn, Tokenizer, chat_from_turns, fnv1a_32
from vllm_sim.errors import RequestError


class MediaUrl(msgspec.Struct):
    url: str = ""


class InputAudio(msgspec.Struct):
    data: str = ""
    format: str = ""


class ContentBlock(msgspec.Struct):
    type: str
    text: str | None = None
    image_url: MediaUrl | None = None
    input_audio: InputAudio | None = None
    video_url: MediaUrl | None = None
    audio_url: MediaUrl | None = None


class FunctionCall(msgspec.Struct):
    name: str = ""
    arguments: str = ""


class ToolCall(msgspec.Struct):
    function: FunctionCall
    id: str | None = None
    type: str = "function"


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[ContentBlock] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class MediaItem:
    """One image, audio or video of a conversation, and where its text sits in its turn."""

    modality: str  # image | audio | video
    identifier: str  # the URL, or the audio data
    turn: int
    start: int  # character span of the item's text within the turn's text
    end: int


@dataclass(frozen=True, slots=True)
class Conversation:
    turns: list[ChatTurn]
    media: list[MediaItem]


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


def media_hash(item: MediaItem, modality_index: int) -> str:
    return f"sim_{_PREFIX[item.modality]}_{modality_index}_{fnv1a_32(item.identifier):x}"


def mm_features(
    conversation: Conversation, tokenizer: Tokenizer, pieces: list[str]
) -> dict[str, dict[str, list[object]]] | None:
    """Render features: per modality, each item's hash, the tokens it occupies, its kwargs.

    `pieces` are the tokens of the rendered conversation; they join back to its text, so
    an item's character span maps onto the tokens that spell it.
    """
    if not conversation.media:
        return None
    starts = _turn_text_starts(conversation.turns, tokenizer)
    token_at: list[int] = []  # token index of every character of the rendered text
    for index, piece in enumerate(pieces):
        token_at += [index] * len(piece)
    hashes: dict[str, list[object]] = {}
    placeholders: dict[str, list[object]] = {}
    kwargs: dict[str, list[object]] = {}
    for item in conversation.media:
        seen = hashes.setdefault(item.modality, [])
        digest = media_hash(item, len(seen))
        seen.append(digest)
        first = token_at[starts[item.turn] + item.start]
        last = token_at[starts[item.turn] + item.end - 1]
        span = {"offset": first, "length": last - first + 1}
        placeholders.setdefault(item.modality, []).append(span)
        kwargs.setdefault(item.modality, []).append(base64.b64encode(digest.encode()).decode())
    return {"mm_hashes": hashes, "mm_placeholders": placeholders, "kwargs_data": kwargs}


def _turn_text_starts(turns: list[ChatTurn], tokenizer: Tokenizer) -> list[int]:
    """Where each turn's text begins in the rendered conversation."""
    starts: list[int] = []
    for i, turn in enumerate(turns):
        head = tokenizer.render_chat(
            chat_from_turns([*turns[:i], ChatTurn(turn.role, "", turn.tool_call_id)])
        )
        starts.append(len(head) - 1)  # the rendering ends the empty turn with "\n"
    return starts
