"""Client mistakes in tools, tool_choice and content blocks: 400 naming them, never a 5xx."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error, assert_validation_error
from tests.support.http import CHAT, post
from tests.support.metrics import RUNNING, scrape
from tests.support.schemas import (
    CORPUS,
    SEARCH,
    TOOL_VALIDATION_PREFIX,
    WEATHER,
    WEATHER_PARAMS,
    http,
    load_schema,
    tool,
    user,
)
from tests.support.server import SimServer

RENDER = "/v1/chat/completions/render"
MESSAGES = user("Hi")


@pytest.fixture(scope="module")
def strict() -> Iterator[httpx.Client]:
    with SimServer([]) as server, http(server) as client:
        yield client


@pytest.fixture(scope="module")
def lenient() -> Iterator[httpx.Client]:
    with SimServer(["--skip-tool-validation"]) as server, http(server) as client:
        yield client


def chat(tools: Any = None, tool_choice: Any = "auto", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": MESSAGES, "tool_choice": tool_choice, **extra}
    if tools is not None:
        body["tools"] = tools
    return body


# ---- structure of `tools` (400 even with --skip-tool-validation) ------------------------------

STRUCTURAL: list[tuple[Any, str]] = [
    ("get_weather", "body.tools"),  # not an array: the body's schema refuses it, as in vLLM
    ({"type": "function"}, "body.tools"),
    ([1], "tools[0]"),
    ([WEATHER, None], "tools[1]"),
    ([{"type": "function", "function": "get_weather"}], "tools[0].function"),
    ([{"type": "function", "function": {}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": 5}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": ""}}], "tools[0].function.name"),
    (
        [{"type": "function", "function": {"name": "f", "description": 3}}],
        "tools[0].function.description",
    ),
    (
        [WEATHER, {"type": "function", "function": {"name": "f", "parameters": []}}],
        "tools[1].function.parameters",
    ),
    ([{"type": "function", "parameters": WEATHER_PARAMS}], "tools[0].name"),
]


@pytest.mark.parametrize(("tools", "param"), STRUCTURAL)
def test_malformed_tools_are_400_naming_the_item(
    tools: Any, param: str, strict: httpx.Client, lenient: httpx.Client
) -> None:
    for client in (strict, lenient):
        for stream in (False, True):
            response = post(client, CHAT, chat(tools, stream=stream))
            if param.startswith("body."):
                assert_validation_error(response, param, "list_type")
                continue
            error = assert_openai_error(response, 400, param=param)
            assert param in error["message"], error


# ---- the tool schema whitelist ------------------------------------------------------------------


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


WHITELIST_VIOLATIONS: list[tuple[Any, str]] = [
    (None, "tools[0].function.parameters: is required"),
    ({}, "tools[0].function.parameters: must not be empty"),
    ({"type": "stringstring"}, "parameters.type: must be one of"),
    (obj(a={"type": "string", "enum": [1, 2]}), 'does not match the schema type "string"'),
    ({**obj(), "$comment": "x"}, 'keyword "$comment" is not allowed'),
    (obj(a={"anyOf": [{"type": "string"}]}), 'keyword "anyOf" is not allowed'),
    (obj(a={"type": ["string", "null"]}), "must be a single type name, not an array"),
    (obj(a={"type": "array"}), 'a schema of type "array" needs "items"'),
    (obj(a={"type": "object"}), 'a schema of type "object" needs "properties"'),
    (obj(a={"type": "array", "items": {"type": "string"}, "minItems": -1}), "integer >= 0"),
    ({**obj(), "additionalProperties": {"type": "string"}}, "must be a boolean"),
    ({**obj(), "required": [1]}, "must be a string"),
    (obj(a={"type": "object", "properties": {}, "enum": ["x"]}), "is not allowed for type"),
    ({"type": "object", "properties": []}, "must be an object mapping names to schemas"),
    (obj(a={"type": "array", "items": 5}), "must be a schema or an array of schemas"),
    (obj(a={"type": "string", "pattern": 7}), "pattern: must be a string"),
    (obj(a={"type": "number", "minimum": "0"}), "minimum: must be a number"),
    (obj(a={"type": "string", "nullable": True}), 'keyword "nullable" is not allowed'),
    (obj(a={"$ref": "#/$defs/a"}), 'keyword "$ref" is not allowed'),
]


@pytest.mark.parametrize(("parameters", "fragment"), WHITELIST_VIOLATIONS)
def test_schema_whitelist_violations_are_400_tool_validation_failed(
    parameters: Any, fragment: str, strict: httpx.Client
) -> None:
    function: dict[str, Any] = {"name": "f"}
    if parameters is not None:
        function["parameters"] = parameters
    for choice in ("auto", "none", "required"):
        response = post(strict, CHAT, chat([{"type": "function", "function": function}], choice))
        error = assert_openai_error(response, 400, param="tools")
        assert error["message"].startswith(TOOL_VALIDATION_PREFIX + "tool 'f': "), error
        assert fragment in error["message"], error


def test_the_first_failing_tool_is_named(strict: httpx.Client) -> None:
    tools = [WEATHER, tool("bad", {"type": "object", "properties": {"x": {"type": "date"}}})]
    error = assert_openai_error(post(strict, CHAT, chat(tools)), 400, param="tools")
    assert error["message"].startswith(
        TOOL_VALIDATION_PREFIX + "tool 'bad': tools[1].function.parameters.properties.x.type"
    ), error


def test_skip_tool_validation_accepts_what_the_whitelist_rejects(lenient: httpx.Client) -> None:
    schema = {**obj(a={"type": "string"}), "required": ["a"], "$comment": "not whitelisted"}
    response = post(lenient, CHAT, chat([tool("f", schema)], "required"))
    assert response.status_code == 200, response.text
    [call] = response.json()["choices"][0]["message"]["tool_calls"]
    words = "testing hello Boston sunny temperature cloudy question Yorick silence lifetime"
    assert json.loads(call["function"]["arguments"])["a"] in words.split(" ")


UNGENERATABLE = tool(
    "f",
    {
        "type": "object",
        "properties": {"a": {"type": "array", "minItems": 5, "maxItems": 1, "items": {}}},
        "required": ["a"],
    },
)


def test_an_ungeneratable_tool_schema_is_a_client_error(lenient: httpx.Client) -> None:
    body = chat([UNGENERATABLE], "required")
    error = assert_openai_error(post(lenient, CHAT, body), 400)
    assert error["message"].startswith("cannot generate a value for tool 'f': "), error
    # Not called: nothing to generate, so a normal answer.
    response = post(lenient, CHAT, chat([UNGENERATABLE], "none"))
    assert response.status_code == 200, response.text


def test_an_ungeneratable_tool_schema_error_names_tools(lenient: httpx.Client) -> None:
    assert_openai_error(post(lenient, CHAT, chat([UNGENERATABLE], "required")), 400, param="tools")


# ---- tool_choice ------------------------------------------------------------------------------

TOOL_CHOICE_ERRORS: list[tuple[Any, Any, str, str]] = [
    # (tools, tool_choice, param, message fragment)
    ([WEATHER], None, "tool_choice", "unknown ToolChoice type: null"),
    (None, None, "tool_choice", "unknown ToolChoice type: null"),
    ([WEATHER], 5, "tool_choice", "unknown ToolChoice type"),
    ([WEATHER], ["auto"], "tool_choice", "unknown ToolChoice type"),
    ([WEATHER], {"type": "bogus"}, "tool_choice.type", "unknown ToolChoice type: bogus"),
    ([WEATHER], {}, "tool_choice.type", "unknown ToolChoice type"),
    ([WEATHER], {"type": None}, "tool_choice.type", "unknown ToolChoice type"),
    ([WEATHER], {"type": "function"}, "tool_choice", "tool_choice function requires a name"),
    ([WEATHER], {"type": "function", "function": {}}, "tool_choice", "requires a name"),
    ([WEATHER], {"type": "function", "function": "f"}, "tool_choice.function", "object"),
    (
        [WEATHER],
        {"type": "function", "function": {"name": 5}},
        "tool_choice.function.name",
        "must be a string",
    ),
    (
        [WEATHER, SEARCH],
        {"type": "function", "function": {"name": "get_time"}},
        "tool_choice",
        "tool with name 'get_time' requested in tool_choice but not found in the tools list",
    ),
    (
        None,
        {"type": "function", "function": {"name": "get_weather"}},
        "tool_choice",
        "not found in the tools list",
    ),
    (
        [WEATHER],
        {"type": "function", "function": {"name": "GET_WEATHER"}},
        "tool_choice",
        "not found in the tools list",
    ),
    ([], "required", "tool_choice", "no tools available to create tool calls"),
    (None, "required", "tool_choice", "no tools available to create tool calls"),
]


@pytest.mark.parametrize(("tools", "choice", "param", "fragment"), TOOL_CHOICE_ERRORS)
def test_bad_tool_choice_is_400_naming_it(
    tools: Any, choice: Any, param: str, fragment: str, strict: httpx.Client
) -> None:
    for stream in (False, True):
        response = post(strict, CHAT, chat(tools, choice, stream=stream))
        error = assert_openai_error(response, 400, param=param)
        assert fragment in error["message"], error


@pytest.mark.parametrize(
    "choice",
    ["auto", "", "anything", {"type": "custom"}, {"type": "allowed_tools", "tools": []}],
)
def test_other_tool_choices_act_as_auto(choice: Any, strict: httpx.Client) -> None:
    outcomes = set()
    for _ in range(30):
        response = post(strict, CHAT, chat([WEATHER], choice))
        assert response.status_code == 200, response.text
        outcomes.add(response.json()["choices"][0]["finish_reason"])
    assert "tool_calls" in outcomes and outcomes & {"stop", "length"}, outcomes


def test_empty_tools_with_auto_or_none_answers_text(strict: httpx.Client) -> None:
    for choice in ("auto", "none"):
        response = post(strict, CHAT, chat([], choice))
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")


# ---- content blocks ---------------------------------------------------------------------------

BLOCK_ERRORS: list[tuple[Any, str, str]] = [
    ({"type": "image_url"}, "image_url", "needs `image_url.url`"),
    ({"type": "image_url", "image_url": {}}, "image_url", "needs `image_url.url`"),
    ({"type": "image_url", "image_url": {"url": ""}}, "image_url", "needs `image_url.url`"),
    ({"type": "video_url", "video_url": {"detail": "x"}}, "video_url", "video_url.url"),
    ({"type": "audio_url"}, "audio_url", "needs `audio_url.url`"),
    ({"type": "input_audio", "input_audio": {"format": "wav"}}, "input_audio", "data"),
    ({"type": "input_audio"}, "input_audio", "needs `input_audio.data`"),
    ({"type": "text"}, "text", "needs `text`"),
    ({"type": "image"}, "type", "Unknown content part type: image"),
    ({"type": "file", "file": {"file_id": "x"}}, "type", "Unknown content part type: file"),
    ({"type": ""}, "type", "Unknown content part type"),
]


@pytest.mark.parametrize(("block", "field", "fragment"), BLOCK_ERRORS)
def test_malformed_content_blocks_are_400_naming_them(
    block: dict[str, Any], field: str, fragment: str, strict: httpx.Client
) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, block]},
    ]
    param = f"messages[1].content[1].{field}"
    for path, body in (
        (CHAT, {"messages": messages}),
        (CHAT, {"messages": messages, "stream": True}),
        (RENDER, {"messages": messages}),
        ("/tokenize", {"messages": messages}),
    ):
        error = assert_openai_error(post(strict, path, body), 400, param=param)
        assert fragment in error["message"], (path, error)


@pytest.mark.parametrize(
    "content",
    [
        5,
        True,
        {"type": "text", "text": "not in a list"},
        [{"text": "no type"}],
        ["a bare string"],
        [{"type": "image_url", "image_url": "https://example.com/a.png"}],
        [{"type": "input_audio", "input_audio": {"data": 5}}],
    ],
)
def test_wrongly_typed_content_is_a_400(content: Any, strict: httpx.Client) -> None:
    for path in (CHAT, RENDER, "/tokenize"):
        response = post(strict, path, {"messages": user(content)})
        assert response.status_code == 400
        assert_openai_error(response)  # the schema's refusal (vLLM's wording) or a later one


# ---- fuzz: mutations must never give a 5xx ---------------------------------------------------

JUNK: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    10**30,
    "",
    "x",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u0000",
    [],
    {},
    [None],
    {"type": "null"},
    {"type": "object"},
    {"type": "array", "items": {}},
    {"$ref": "#"},
    {"$ref": "#/properties"},
    {"anyOf": []},
    {"enum": []},
    {"type": "integer", "minimum": 5, "maximum": 1},
    {"type": "string", "pattern": "("},
    {"type": "string", "minLength": 9, "maxLength": 2},
    {"type": "number", "multipleOf": 0},
    {"required": ["nope"], "type": "object", "properties": {}, "additionalProperties": False},
]
KEYS = [
    "type",
    "properties",
    "items",
    "required",
    "enum",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "pattern",
    "format",
    "additionalProperties",
    "$ref",
    "anyOf",
    "const",
    "name",
    "function",
    "parameters",
    "url",
    "text",
    "image_url",
    "input_audio",
    "data",
    "zz",
]


def _containers(value: Any, found: list[Any]) -> list[Any]:
    if isinstance(value, dict | list):
        found.append(value)
        for child in value.values() if isinstance(value, dict) else value:
            _containers(child, found)
    return found


def _junk(rng: random.Random) -> Any:
    if rng.random() < 0.03:
        # A deep schema now and then; the deepest ones have tests of their own below.
        deep: Any = "bottom"
        for _ in range(60):
            deep = {"type": "object", "properties": {"x": deep}} if rng.random() < 0.5 else [deep]
        return deep
    return copy.deepcopy(rng.choice(JUNK))


def mutate(rng: random.Random, value: Any, times: int) -> Any:
    value = copy.deepcopy(value)
    for _ in range(times):
        containers = _containers(value, [])
        if not containers:  # a scalar: replaced whole
            value = _junk(rng)
            continue
        target = rng.choice(containers)
        operation = rng.randrange(4)
        if isinstance(target, dict):
            keys = list(target)
            if operation == 0 and keys:
                del target[rng.choice(keys)]
            elif operation == 1 and keys:
                target[rng.choice(keys)] = _junk(rng)
            elif operation == 2:
                target[rng.choice(KEYS)] = _junk(rng)
            elif keys:
                key = rng.choice(keys)
                target[key] = [target[key]]
        elif target:
            index = rng.randrange(len(target))
            if operation == 0:
                del target[index]
            elif operation in (1, 2):
                target[index] = _junk(rng)
            else:
                target.insert(index, copy.deepcopy(target[index]))
    return value


def assert_no_server_error(response: httpx.Response, request: Any) -> None:
    shown = json.dumps(request)[:600]
    assert response.status_code < 500, (response.status_code, response.text[:300], shown)
    if response.status_code >= 400:
        assert_openai_error(response)
    elif response.headers["content-type"].startswith("text/event-stream"):
        for event in response.text.split("\n\n"):
            if event.startswith('data: {"error"'):
                code = json.loads(event.removeprefix("data: "))["error"]["code"]
                assert code < 500, (event, shown)


CHOICES: list[Any] = [
    "auto",
    "required",
    "none",
    None,
    {"type": "function", "function": {"name": "get_weather"}},
    {"type": "function", "function": {"name": "fn"}},
    {"type": "function", "name": "search"},
    {"type": "function"},
    {"type": "custom"},
]


def test_fuzzed_tool_definitions_never_give_5xx(
    strict: httpx.Client, lenient: httpx.Client
) -> None:
    rng = random.Random(1337)
    corpus = [load_schema(p) for p in CORPUS if p.stem in ("flight_booking", "k8s_deployment")]
    base = [WEATHER, SEARCH, *(tool("fn", schema) for schema in corpus)]
    statuses: dict[int, int] = {}
    for i in range(240):
        tools = mutate(rng, rng.sample(base, rng.randint(1, len(base))), rng.randint(1, 3))
        body: dict[str, Any] = {"messages": MESSAGES, "tools": tools}
        if rng.random() < 0.8:
            body["tool_choice"] = mutate(rng, rng.choice(CHOICES), rng.randrange(2))
        if rng.random() < 0.3:
            body["stream"] = True
        client = strict if i % 2 else lenient
        response = post(client, CHAT, body)
        assert_no_server_error(response, body)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
    # The fuzz reaches both outcomes: it is neither all rejected nor all accepted.
    assert statuses.get(200, 0) >= 20 and statuses.get(400, 0) >= 20, statuses


def test_fuzzed_content_blocks_never_give_5xx(strict: httpx.Client) -> None:
    rng = random.Random(4242)
    base = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                {"type": "audio_url", "audio_url": {"url": "https://example.com/a.mp3"}},
                {"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    statuses: dict[int, int] = {}
    for i in range(200):
        messages = mutate(rng, base, rng.randint(1, 3))
        path = (CHAT, RENDER, "/tokenize")[i % 3]
        body: dict[str, Any] = {"messages": messages}
        if path == CHAT and rng.random() < 0.3:
            body["stream"] = True
        response = post(strict, path, body)
        assert_no_server_error(response, body)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
    assert statuses.get(200, 0) >= 20 and statuses.get(400, 0) >= 20, statuses


# ---- deeply nested schemas ------------------------------------------------------------------


def nested_schema(depth: int) -> str:
    """A whitelisted object schema `depth` levels deep, as JSON text (too deep for json.dumps
    at the default recursion limit, still well within the server's JSON nesting limit)."""
    opening = '{"type":"object","properties":{"x":'
    closing = '},"required":["x"]}'
    return opening * depth + '{"type":"string"}' + closing * depth


def deep_bodies(depth: int) -> list[str]:
    schema = nested_schema(depth)
    messages = json.dumps(MESSAGES)
    tools = f'[{{"type":"function","function":{{"name":"f","parameters":{schema}}}}}]'
    response_format = f'{{"type":"json_schema","json_schema":{{"name":"x","schema":{schema}}}}}'
    return [
        f'{{"messages":{messages},"tools":{tools},"tool_choice":"required"}}',
        f'{{"messages":{messages},"tools":{tools},"tool_choice":"required","stream":true}}',
        f'{{"messages":{messages},"response_format":{response_format}}}',
    ]


@contextmanager
def own_server(max_num_seqs: int) -> Iterator[httpx.Client]:
    """A server of its own, stopped without waiting for a drain (a leaked slot would hold
    the drain for 30 s)."""
    server = SimServer(["--max-num-seqs", str(max_num_seqs)]).start()
    try:
        with http(server, timeout=3.0) as client:
            yield client
    finally:
        server.stop(timeout=0.5)


def test_a_moderately_deep_schema_is_generated(strict: httpx.Client) -> None:
    for body in deep_bodies(100):
        response = post(strict, CHAT, body)
        assert response.status_code == 200, response.text[:300]
        assert '"x' in response.text


def test_a_very_deep_schema_is_never_a_5xx() -> None:
    with own_server(8) as client:
        statuses = [post(client, CHAT, body).status_code for body in deep_bodies(400)]
    assert all(status < 500 for status in statuses), statuses


def test_a_crashing_request_does_not_take_a_running_slot_forever() -> None:
    with own_server(1) as client:
        post(client, CHAT, deep_bodies(400)[0])
        assert scrape(client).value(RUNNING) == 0, "the failed request still holds its slot"
        try:
            response = post(client, CHAT, {"messages": MESSAGES})
        except httpx.TimeoutException:
            pytest.fail("a plain request got no answer within 3 s (one slot, leaked)")
    assert response.status_code == 200, response.text
