"""Wire helpers for the /v1/responses and /v1/messages end-to-end tests.

Both APIs stream named SSE events (`event: <name>` + `data: <json>`, no `[DONE]`); the
Responses API answers errors in the OpenAI shape (checked with tests.support.http.assert_error)
and the Messages API in Anthropic's `{"type":"error","error":{type,message}}` envelope.
"""

from __future__ import annotations

import importlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx

# No type stubs are installed for jsonschema (other test packages load it the same way).
jsonschema: Any = importlib.import_module("jsonschema")

RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
LOGPROBS_INCLUDE: Final = "message.output_text.logprobs"


FC_ID = re.compile(r"fc_([0-9a-f]{16})")
CALL_ID = re.compile(r"call_([0-9a-f]{16})")
TOOLU_ID = re.compile(r"toolu_[0-9a-f]{16}")

UNITS = ["celsius", "fahrenheit"]
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": UNITS},
    },
    "required": ["city"],
}
TIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string"}, "hours": {"type": "integer"}},
    "required": ["zone", "hours"],
}
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

# The Responses API's flat function tools.
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": WEATHER_SCHEMA,
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_time",
    "description": "Local time",
    "parameters": TIME_SCHEMA,
}

# The Messages API's tools.
A_WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": WEATHER_SCHEMA,
}
A_TIME_TOOL: dict[str, Any] = {
    "name": "get_time",
    "description": "Local time",
    "input_schema": TIME_SCHEMA,
}
A_PING_TOOL: dict[str, Any] = {
    "name": "ping",
    "description": "No args",
    "input_schema": EMPTY_SCHEMA,
}

TEXT_EVENTS = (
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
)
TOOL_EVENTS = (
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
)


@dataclass(frozen=True)
class Event:
    """One named SSE event, with its arrival time in seconds from the request."""

    name: str
    data: dict[str, Any]
    at: float = 0.0


def parse_named_sse(raw: bytes) -> list[Event]:
    """Strict framing: every event is `event: <name>\\ndata: <json>\\n\\n`, the JSON `type`
    equals the name, and there is no `[DONE]` anywhere."""
    assert b"[DONE]" not in raw, raw[-300:]
    frames = raw.split(b"\n\n")
    assert frames[-1] == b"", "the body must end right after the last event"
    events = []
    for frame in frames[:-1]:
        lines = frame.split(b"\n")
        assert len(lines) == 2, frame
        assert lines[0].startswith(b"event: ") and lines[1].startswith(b"data: "), frame
        name = lines[0][len(b"event: ") :].decode()
        data = json.loads(lines[1][len(b"data: ") :])
        assert isinstance(data, dict) and data.get("type") == name, frame
        events.append(Event(name, data))
    return events


def stream_events(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Event]:
    """POSTs a streaming request (stream: true added) and returns its events, timed."""
    start = time.monotonic()
    events: list[Event] = []
    with client.stream("POST", path, json={**body, "stream": True}, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = b""
        for chunk in response.iter_bytes():
            now = time.monotonic() - start
            raw += chunk
            *complete, rest = raw.split(b"\n\n")
            for frame in complete:
                events.extend(Event(e.name, e.data, now) for e in parse_named_sse(frame + b"\n\n"))
            raw = rest
        assert raw == b"", raw
    return events


def names(events: list[Event]) -> list[str]:
    return [event.name for event in events]


def collapse(sequence: Sequence[str]) -> list[str]:
    """Runs of the same name reduced to one (to compare an order with its repeated deltas)."""
    return [name for i, name in enumerate(sequence) if i == 0 or sequence[i - 1] != name]


def of(events: list[Event], name: str) -> list[dict[str, Any]]:
    return [event.data for event in events if event.name == name]


def one(events: list[Event], name: str) -> dict[str, Any]:
    found = of(events, name)
    assert len(found) == 1, (name, names(events))
    return found[0]


def request_id_of(response_id: str, prefix: str) -> str:
    """The request id after `prefix`: 16 hex characters, as vLLM 0.32 makes them."""
    assert re.fullmatch(re.escape(prefix) + "[0-9a-f]{16}", response_id), response_id
    return response_id[len(prefix) :]
