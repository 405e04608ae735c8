"""Malformed /v1/responses and /v1/messages requests: a 4xx in the API's own error shape, never 5xx.

/v1/responses answers in the OpenAI shape, /v1/messages in Anthropic's envelope. A small
fuzz mutates every field of valid bodies and asserts the server never answers 5xx.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.errors import VALIDATION_TYPE, assert_anthropic_error, assert_openai_error
from tests.support.http import VALIDATION_PREFIX, post
from tests.support.named_sse import (
    A_WEATHER_TOOL,
    LOGPROBS_INCLUDE,
    MESSAGES,
    RESPONSES,
    WEATHER_TOOL,
    parse_named_sse,
)
from tests.support.server import SimServer

USER = [{"role": "user", "content": "Hello"}]
# vLLM's refusal of more output tokens than the whole context (1024) holds.
TOO_MANY = "cannot be greater than max_model_len=1024"


@pytest.fixture(scope="module")
def http(sim: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=30) as raw:
        yield raw


def responses_body(**extra: Any) -> dict[str, Any]:
    return {"input": "Hello", "max_output_tokens": 5, **extra}


def messages_body(**extra: Any) -> dict[str, Any]:
    return {"messages": USER, "max_tokens": 5, **extra}


def items(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


# ------------------------------------------------------------------------ /v1/responses
BAD_RESPONSES: dict[str, tuple[Any, int, str | None]] = {
    # name: (body, status, text the message contains)
    "missing-input": ({"max_output_tokens": 5}, 400, "input is required"),
    "null-input": (responses_body(input=None), 400, "input is required"),
    "number-input": (responses_body(input=5), 400, VALIDATION_PREFIX),
    "object-input": (responses_body(input={"role": "user"}), 400, VALIDATION_PREFIX),
    "non-object-item": (responses_body(input=[1]), 400, None),
    # A reasoning item is history vLLM reads, but not one it cannot decrypt.
    "encrypted-reasoning-item": (
        responses_body(input=[{"type": "reasoning", "summary": [], "encrypted_content": "x"}]),
        400,
        "Encrypted content is not supported.",
    ),
    "item-reference": (
        responses_body(input=[{"type": "item_reference", "id": "x"}]),
        400,
        'unsupported input item type "item_reference"',
    ),
    "input-video-part": (
        responses_body(input=items({"type": "input_video", "video_url": "https://v"})),
        400,
        'unsupported input content type "input_video"',
    ),
    "input-file-part": (
        responses_body(input=items({"type": "input_file", "file_id": "f"})),
        400,
        'unsupported input content type "input_file"',
    ),
    "refusal-part": (
        responses_body(input=items({"type": "refusal", "refusal": "no"})),
        400,
        'unsupported input content type "refusal"',
    ),
    "image-without-url": (responses_body(input=items({"type": "input_image"})), 400, None),
    "image-url-object": (
        responses_body(input=items({"type": "input_image", "image_url": {"url": "https://i"}})),
        400,
        None,
    ),
    "non-object-part": (responses_body(input=[{"role": "user", "content": ["x"]}]), 400, None),
    "text-not-string": (responses_body(input=items({"type": "input_text", "text": 5})), 400, None),
    "content-number": (responses_body(input=[{"role": "user", "content": 5}]), 400, None),
    "role-number": (responses_body(input=[{"role": 5, "content": "x"}]), 400, None),
    "arguments-object": (
        responses_body(input=[{"type": "function_call", "name": "f", "arguments": {"a": 1}}]),
        400,
        None,
    ),
    "output-number": (
        responses_body(input=[{"type": "function_call_output", "call_id": "c", "output": 5}]),
        400,
        None,
    ),
    "tools-not-array": (responses_body(tools="x"), 400, VALIDATION_PREFIX),
    "tool-not-object": (responses_body(tools=[5]), 400, None),
    "web-search-tool": (responses_body(tools=[{"type": "web_search"}]), 400, None),
    "file-search-tool": (
        responses_body(tools=[{"type": "file_search", "vector_store_ids": []}]),
        400,
        None,
    ),
    "tool-without-parameters": (
        responses_body(tools=[{"type": "function", "name": "f"}]),
        400,
        "Tool validation failed",
    ),
    "tool-bad-schema": (
        responses_body(tools=[{**WEATHER_TOOL, "parameters": {"type": "object"}}]),
        400,
        "Tool validation failed",
    ),
    "tool-choice-file-search": (
        responses_body(tools=[WEATHER_TOOL], tool_choice={"type": "file_search"}),
        400,
        "unknown ToolChoice type: file_search",
    ),
    "tool-choice-function-without-name": (
        responses_body(tools=[WEATHER_TOOL], tool_choice={"type": "function"}),
        400,
        "tool_choice function requires a name",
    ),
    "tool-choice-null": (responses_body(tool_choice=None), 400, None),
    "tool-choice-number": (responses_body(tool_choice=5), 400, None),
    "tool-choice-unknown-function": (
        responses_body(tools=[WEATHER_TOOL], tool_choice={"type": "function", "name": "nope"}),
        400,
        "not found in the tools list",
    ),
    "required-without-tools": (responses_body(tool_choice="required"), 400, None),
    "zero-max-output-tokens": (
        responses_body(max_output_tokens=0),
        400,
        "Max completion tokens and max tokens should be positive",
    ),
    "negative-max-output-tokens": (responses_body(max_output_tokens=-3), 400, None),
    "string-max-output-tokens": (responses_body(max_output_tokens="5"), 400, VALIDATION_PREFIX),
    "ignore-eos-without-max": ({"input": "x", "ignore_eos": True}, 400, "Ignore_eos"),
    "negative-top-logprobs": (
        responses_body(include=[LOGPROBS_INCLUDE], top_logprobs=-1),
        400,
        None,
    ),
    "too-many-top-logprobs": (
        responses_body(include=[LOGPROBS_INCLUDE], top_logprobs=21),
        400,
        None,
    ),
    "unknown-text-format": (responses_body(text={"format": {"type": "xml"}}), 400, None),
    "json-schema-without-schema": (
        responses_body(text={"format": {"type": "json_schema", "name": "x"}}),
        400,
        None,
    ),
    "json-schema-unsupported": (
        responses_body(
            text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "z"}}}
        ),
        400,
        None,
    ),
    "include-not-array": (responses_body(include="x"), 400, VALIDATION_PREFIX),
    "stream-not-bool": (responses_body(stream="yes"), 400, VALIDATION_PREFIX),
    "context-overflow": (responses_body(max_output_tokens=100_000), 400, TOO_MANY),
    "unknown-model": (responses_body(model="no-such-model"), 404, "does not exist"),
    "not-json": (b"{not json", 400, VALIDATION_PREFIX),
    "json-array": (b"[]", 400, VALIDATION_PREFIX),
}


def cases(
    table: dict[str, tuple[Any, int, str | None]], bugs: dict[str, pytest.MarkDecorator]
) -> list[Any]:
    """Each case plain and (when the body is an object without `stream`) streamed."""
    params = []
    for name, (body, _, _) in table.items():
        params.append(pytest.param(name, False, id=f"{name}-plain"))
        if isinstance(body, dict) and "stream" not in body:
            marks = [bugs[name]] if name in bugs else []
            params.append(pytest.param(name, True, id=f"{name}-stream", marks=marks))
    return params


@pytest.mark.parametrize(
    ("case", "stream"),
    cases(BAD_RESPONSES, {}),
)
def test_bad_responses_request(http: httpx.Client, case: str, stream: bool) -> None:
    body, status, contains = BAD_RESPONSES[case]
    if stream:
        body = {**body, "stream": True}
    # A streamed request failing validation gets a plain JSON error, never an SSE stream.
    kind = VALIDATION_TYPE if contains == VALIDATION_PREFIX else None
    assert_openai_error(post(http, RESPONSES, body), status, contains=contains, error_type=kind)


def test_builtin_tool_names_its_type(http: httpx.Client) -> None:
    response = post(http, RESPONSES, responses_body(tools=[{"type": "web_search"}]))
    assert_openai_error(response, 400, contains='unsupported tool type "web_search"')


# ------------------------------------------------------------------------ /v1/messages
BAD_MESSAGES: dict[str, tuple[Any, int, str | None]] = {
    "missing-max-tokens": ({"messages": USER}, 400, "max_tokens is required"),
    "null-max-tokens": (messages_body(max_tokens=None), 400, "max_tokens is required"),
    "zero-max-tokens": (
        messages_body(max_tokens=0),
        400,
        "Max completion tokens and max tokens should be positive",
    ),
    "negative-max-tokens": (messages_body(max_tokens=-5), 400, None),
    "string-max-tokens": (messages_body(max_tokens="5"), 400, VALIDATION_PREFIX),
    "missing-messages": ({"max_tokens": 5}, 400, "messages must not be empty"),
    "empty-messages": (messages_body(messages=[]), 400, "messages must not be empty"),
    "only-empty-content": (
        messages_body(messages=[{"role": "user", "content": ""}]),
        400,
        "messages must not be empty",
    ),
    "messages-string": (messages_body(messages="hi"), 400, None),
    "message-not-object": (messages_body(messages=[5]), 400, None),
    "message-without-role": (messages_body(messages=[{"content": "x"}]), 400, None),
    "content-number": (messages_body(messages=[{"role": "user", "content": 5}]), 400, None),
    "content-null": (messages_body(messages=[{"role": "user", "content": None}]), 400, None),
    "block-not-object": (messages_body(messages=[{"role": "user", "content": ["x"]}]), 400, None),
    "text-block-without-text": (
        messages_body(messages=items({"type": "text"})),
        400,
        None,
    ),
    "image-without-source": (
        messages_body(messages=items({"type": "image"})),
        400,
        "image content block is missing required 'source' field",
    ),
    "image-source-without-url": (
        messages_body(messages=items({"type": "image", "source": {"type": "url"}})),
        400,
        None,
    ),
    "tool-use-string-input": (
        messages_body(
            messages=[
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}],
                }
            ]
        ),
        400,
        None,
    ),
    "tool-use-without-name": (
        messages_body(
            messages=[
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}
            ]
        ),
        400,
        None,
    ),
    "tool-result-number": (
        messages_body(messages=items({"type": "tool_result", "tool_use_id": "t", "content": 5})),
        400,
        None,
    ),
    "system-number": (messages_body(system=5), 400, None),
    "system-block-without-text": (messages_body(system=[{"type": "text"}]), 400, None),
    "system-non-object-block": (messages_body(system=[5]), 400, None),
    "tools-not-array": (messages_body(tools="x"), 400, None),
    "tool-not-object": (messages_body(tools=[5]), 400, None),
    "tool-without-schema": (
        messages_body(tools=[{"name": "f", "description": "d"}]),
        400,
        "Tool validation failed",
    ),
    "server-tool": (
        messages_body(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
        400,
        None,
    ),
    "tool-choice-tool-without-name": (
        messages_body(tools=[A_WEATHER_TOOL], tool_choice={"type": "tool"}),
        400,
        "tool_choice of type 'tool' requires a non-empty 'name'",
    ),
    "tool-choice-unknown-type": (
        messages_body(tools=[A_WEATHER_TOOL], tool_choice={"type": "sometimes"}),
        400,
        None,
    ),
    "tool-choice-string": (messages_body(tools=[A_WEATHER_TOOL], tool_choice="auto"), 400, None),
    "tool-choice-unknown-tool": (
        messages_body(tools=[A_WEATHER_TOOL], tool_choice={"type": "tool", "name": "nope"}),
        400,
        "not found in the tools list",
    ),
    "any-without-tools": (messages_body(tool_choice={"type": "any"}), 400, None),
    "stream-not-bool": (messages_body(stream="yes"), 400, VALIDATION_PREFIX),
    "ignore-eos-not-bool": (messages_body(ignore_eos="x"), 400, VALIDATION_PREFIX),
    "context-overflow": (messages_body(max_tokens=100_000), 400, TOO_MANY),
    "unknown-model": (messages_body(model="no-such-model"), 404, "does not exist"),
    "not-json": (b"{not json", 400, VALIDATION_PREFIX),
    "json-array": (b"[]", 400, VALIDATION_PREFIX),
}


@pytest.mark.parametrize(("case", "stream"), cases(BAD_MESSAGES, {}))
def test_bad_messages_request(http: httpx.Client, case: str, stream: bool) -> None:
    body, status, contains = BAD_MESSAGES[case]
    if stream:
        body = {**body, "stream": True}
    assert_anthropic_error(post(http, MESSAGES, body), status, contains=contains)


# ------------------------------------------------------------------------ fuzz
ODD_VALUES: list[Any] = [None, True, 0, -1, 2.5, "", "x", [], {}, [None], {"type": "x"}, [{}]]

RESPONSES_BASES: list[dict[str, Any]] = [
    {
        "model": "test-model",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Hi"},
                    {"type": "input_image", "image_url": "https://x.test/a.png"},
                ],
            },
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "instructions": "Be brief.",
        "max_output_tokens": 4,
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "include": [LOGPROBS_INCLUDE],
        "top_logprobs": 1,
    },
    {
        "input": "Hi",
        "stream": False,
        "max_output_tokens": 4,
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {
            "format": {
                "type": "json_schema",
                "name": "r",
                "schema": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}},
                    "required": ["a"],
                },
            }
        },
    },
]
MESSAGES_BASES: list[dict[str, Any]] = [
    {
        "model": "test-model",
        "max_tokens": 4,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hi"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "P"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "ok"}],
                    },
                ],
            },
        ],
        "tools": [A_WEATHER_TOOL],
        "tool_choice": {"type": "auto"},
    },
    {
        "max_tokens": 4,
        "stream": False,
        "system": "s",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [A_WEATHER_TOOL],
        "tool_choice": {"type": "tool", "name": "get_weather"},
    },
]

Path = tuple[str | int, ...]


def paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every key and index of a JSON value, depth first."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from paths(child, (*prefix, index))


def mutations(base: dict[str, Any]) -> Iterator[tuple[Path, str, dict[str, Any]]]:
    """(path, label, body) for every path of `base` replaced by each odd value, or deleted."""
    for path in paths(base):
        parent_path, last = path[:-1], path[-1]
        for replacement in [*ODD_VALUES, "<delete>"]:
            body = copy.deepcopy(base)
            parent: Any = body
            for key in parent_path:
                parent = parent[key]
            if replacement == "<delete>":
                del parent[last]
            else:
                parent[last] = replacement
            yield path, f"{path}={json.dumps(replacement)}", body


# 5xx answers the fuzz already knows about (none now): left out of the fuzz verdict so that
# the fuzz still fails on any new one.
KNOWN_5XX: dict[str, set[Path]] = {RESPONSES: set(), MESSAGES: set()}


def check_answer(response: httpx.Response, path: str, kind: str, label: str) -> str:
    if response.status_code >= 500:
        return "5xx"
    if response.status_code >= 400:
        if path == MESSAGES:
            assert_anthropic_error(response, response.status_code)
        else:
            assert_openai_error(response)  # any 4xx, vLLM's validation error included
        return "error"
    if response.headers["content-type"].startswith("text/event-stream"):
        events = parse_named_sse(response.content)
        last = events[-1].name
        assert last in ("response.completed", "message_stop"), label
        return "stream"
    assert response.json()["type" if path == MESSAGES else "object"] == kind, label
    return "ok"


@pytest.mark.parametrize(
    ("path", "kind", "bases"),
    [(RESPONSES, "response", RESPONSES_BASES), (MESSAGES, "message", MESSAGES_BASES)],
    ids=["responses", "messages"],
)
def test_fuzz_never_5xx(
    http: httpx.Client, path: str, kind: str, bases: list[dict[str, Any]]
) -> None:
    outcomes: dict[str, int] = {}
    server_errors = []
    for base in bases:
        assert check_answer(post(http, path, base), path, kind, "base") == "ok"
        for mutated, label, body in mutations(base):
            response = post(http, path, body)
            outcome = check_answer(response, path, kind, label)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome == "5xx" and mutated not in KNOWN_5XX[path]:
                server_errors.append((label, response.status_code, response.text[:200]))
    assert server_errors == []
    # The fuzz reached the validation, generation and streaming paths.
    assert outcomes.get("error", 0) > 100 and outcomes.get("ok", 0) > 100, outcomes
    assert outcomes.get("stream", 0) > 0, outcomes
    assert http.get("/health").status_code == 200


@pytest.mark.parametrize("kind", [[], {}, [None], {"type": "any"}], ids=str)
def test_messages_tool_choice_type_not_a_string(http: httpx.Client, kind: Any) -> None:
    body = messages_body(tools=[A_WEATHER_TOOL], tool_choice={"type": kind})
    assert_anthropic_error(post(http, MESSAGES, body), 400)
