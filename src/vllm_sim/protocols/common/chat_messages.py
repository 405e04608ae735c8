"""Chat messages as the wire carries them (OpenAI's shape), decoded by msgspec. Apart from
the code that reads them (conversation.py): a module that declares msgspec Structs cannot
be compiled by mypyc, and a reader kept apart from them can be, where it does not run on a
worker thread (see setup.py)."""

from __future__ import annotations

import msgspec


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
    name: str | None = None
