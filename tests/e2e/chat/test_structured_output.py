"""`response_format` end to end: json_schema output validates for the corpus; json_object."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import CHAT, EOS_TOKENS, is_bank_text, post
from tests.support.schemas import (
    CORPUS,
    LONG_CONTEXT,
    assert_validates,
    load_schema,
    sdk,
    token_count,
    user,
)
from tests.support.server import SimServer

MESSAGES: Any = user("Fill in the form")
DRAWS_PER_SCHEMA = 3


# Tool validation stays on: the tool whitelist must not apply to response schemas.
server = server_fixture(LONG_CONTEXT)


@pytest.fixture(scope="module")
def client(server: SimServer) -> Iterator[openai.OpenAI]:
    with sdk(server) as sdk_client:
        yield sdk_client


raw = http_fixture("server")


def json_schema_format(schema: dict[str, Any], name: str = "answer") -> Any:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def create(client: openai.OpenAI, **kwargs: Any) -> ChatCompletion:
    completion: ChatCompletion = client.chat.completions.create(
        model="test-model", messages=MESSAGES, **kwargs
    )
    return completion


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_json_schema_output_validates_for_every_corpus_schema(
    path: Path, client: openai.OpenAI, raw: httpx.Client
) -> None:
    schema = load_schema(path)
    for _ in range(DRAWS_PER_SCHEMA):
        completion = create(client, response_format=json_schema_format(schema))
        [choice] = completion.choices
        assert choice.finish_reason == "stop"
        assert choice.message.tool_calls is None
        content = choice.message.content
        assert isinstance(content, str)
        assert_validates(schema, json.loads(content), path.stem)
        assert completion.usage is not None
        # The document, then the end-of-sequence token that ends it.
        assert completion.usage.completion_tokens == token_count(raw, content) + EOS_TOKENS


@pytest.mark.parametrize(
    "stem", ["pydantic_user", "json_expression", "payment_anyof", "structured_output_recipe"]
)
def test_streamed_json_schema_output_validates(stem: str, client: openai.OpenAI) -> None:
    path = next((p for p in CORPUS if p.stem == stem), None)
    if path is None:
        pytest.skip(f"{stem}.json is not in the corpus")
    schema = load_schema(path)
    with client.chat.completions.stream(
        model="test-model", messages=MESSAGES, response_format=json_schema_format(schema)
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta" and e.delta]
        final = stream.get_final_completion()
    [choice] = final.choices
    assert choice.finish_reason == "stop"
    assert choice.message.content == "".join(deltas)
    assert len(deltas) > 1, "streamed token by token"
    assert_validates(schema, json.loads("".join(deltas)), stem)


def test_json_object_gives_a_json_object(client: openai.OpenAI) -> None:
    for _ in range(20):
        completion = create(client, response_format={"type": "json_object"})
        [choice] = completion.choices
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.content, str)
        assert isinstance(json.loads(choice.message.content), dict)


def test_auto_tools_with_json_object_give_calls_or_json(client: openai.OpenAI) -> None:
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
            },
        }
    ]
    kinds = set()
    for _ in range(40):
        completion = create(client, tools=tools, response_format={"type": "json_object"})
        message = completion.choices[0].message
        if message.tool_calls:
            kinds.add("call")
            continue
        assert isinstance(message.content, str)
        assert isinstance(json.loads(message.content), dict)
        kinds.add("json")
    assert kinds == {"call", "json"}


def test_text_format_is_plain_text(client: openai.OpenAI) -> None:
    completion = create(client, response_format={"type": "text"})
    content = completion.choices[0].message.content
    assert isinstance(content, str) and is_bank_text(content)


def test_small_max_tokens_cuts_the_document_with_length(
    client: openai.OpenAI, raw: httpx.Client
) -> None:
    schema = load_schema(next(p for p in CORPUS if p.stem == "flight_booking"))
    completion = create(client, response_format=json_schema_format(schema), max_tokens=5)
    [choice] = completion.choices
    assert choice.finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 5
    content = choice.message.content
    assert isinstance(content, str) and content.startswith('{"')
    assert token_count(raw, content) == 5
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


@pytest.mark.parametrize(("max_tokens", "finish", "tokens"), [(7, "length", 7), (8, "stop", 8)])
def test_a_document_that_fills_max_tokens_has_no_room_for_its_end(
    raw: httpx.Client, max_tokens: int, finish: str, tokens: int
) -> None:
    """`{"a":1}` is 7 tokens: with max_tokens 7 it is whole but the end-of-sequence token does
    not fit, so the model was cut ("length"); with 8 it ends by itself ("stop")."""
    schema = {
        "type": "object",
        "properties": {"a": {"const": 1}},
        "required": ["a"],
        "additionalProperties": False,
    }
    body = {
        "messages": MESSAGES,
        "max_tokens": max_tokens,
        "response_format": json_schema_format(schema),
    }
    reply = post(raw, CHAT, body).json()
    [choice] = reply["choices"]
    assert choice["message"]["content"] == '{"a":1}'
    assert token_count(raw, '{"a":1}') == 7
    assert choice["finish_reason"] == finish
    assert reply["usage"]["completion_tokens"] == tokens


def test_the_validator_used_by_these_tests_is_strict() -> None:
    """Guards the guard: formats and old drafts are really checked."""
    schema = {
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "url": {"type": "string", "format": "uri"},
            "t": {"type": "string", "format": "time"},
        },
    }
    assert_validates(
        schema, {"at": "2024-01-02T03:04:05Z", "url": "https://x.y/z", "t": "03:04:05Z"}
    )
    for bad in ({"at": "yesterday"}, {"url": "not a uri"}, {"t": "25:99:00"}):
        with pytest.raises(AssertionError):
            assert_validates(schema, bad)
    draft4 = load_schema(next(p for p in CORPUS if p.stem == "draft4_exclusive_bool"))
    with pytest.raises(AssertionError):
        assert_validates(draft4, {"probability": 1, "count": 1, "offset": 10})


@pytest.mark.parametrize(
    ("response_format", "fragment"),
    [
        ("json", "must be an object"),
        ([], "must be an object"),
        ({}, "response_format.type is required"),
        ({"type": None}, "response_format.type is required"),
        ({"type": "yaml"}, "unknown response_format type: yaml"),
        ({"type": 3}, "unknown response_format type"),
        ({"type": "json_schema"}, "response_format.json_schema is required"),
        ({"type": "json_schema", "json_schema": "x"}, "json_schema must be an object"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema is required"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}},
            "schema must be an object",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": 5, "schema": {"type": "object"}}},
            "name must be a string",
        ),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "x", "strict": "yes", "schema": {"type": "object"}},
            },
            "strict must be a boolean",
        ),
    ],
)
def test_bad_response_format_is_400_naming_it(
    response_format: object, fragment: str, raw: httpx.Client
) -> None:
    body = {"messages": MESSAGES, "response_format": response_format}
    assert_openai_error(post(raw, CHAT, body), 400, param="response_format", contains=fragment)


UNSATISFIABLE: list[dict[str, Any]] = [
    {"type": "array", "minItems": 5, "maxItems": 2, "items": {"type": "string"}},
    {"type": "integer", "minimum": 10, "maximum": 1},
    {"$ref": "#/$defs/missing"},
    {"type": "string", "pattern": "(a)\\1"},
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
]


@pytest.mark.parametrize("schema", UNSATISFIABLE)
def test_unsatisfiable_response_schema_is_a_client_error(
    schema: dict[str, Any], raw: httpx.Client
) -> None:
    body = {"messages": MESSAGES, "response_format": json_schema_format(schema)}
    error = assert_openai_error(post(raw, CHAT, body), 400)
    assert error["message"].startswith("cannot generate a value for response_format: "), error
    # The schema is probed before admission, so a stream is refused the same way.
    streamed = assert_openai_error(post(raw, CHAT, {**body, "stream": True}), 400)
    assert streamed["message"] == error["message"]


def test_unsatisfiable_response_schema_error_names_response_format(raw: httpx.Client) -> None:
    body = {"messages": MESSAGES, "response_format": json_schema_format(UNSATISFIABLE[0])}
    assert_openai_error(post(raw, CHAT, body), 400, param="response_format")
