"""Tool calls end to end through the openai SDK: tool_choice modes, the schema corpus, streams."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageToolCall

from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import CHAT, EOS_TOKENS, MESSAGE_KEYS, parse_sse, post
from tests.support.schemas import (
    CORPUS,
    LONG_CONTEXT,
    SEARCH,
    TIME,
    TOOL_ID_RE,
    TOOL_VALIDATION_PREFIX,
    WEATHER,
    assert_validates,
    load_schema,
    sdk,
    token_count,
    tool,
    user,
)
from tests.support.server import SimServer

MESSAGES: Any = user("What should I do?")
DRAWS_PER_SCHEMA = 6


# Default tool settings: whitelist validation on, extra-call probability 45.
strict = server_fixture(LONG_CONTEXT)


# For corpus schemas outside the tool whitelist ($ref, anyOf, const, type arrays...).
lenient = server_fixture([*LONG_CONTEXT, "--skip-tool-validation"])


no_extra = server_fixture(["--tool-call-extra-call-probability", "0"])


@pytest.fixture(scope="module")
def strict_sdk(strict: SimServer) -> Iterator[openai.OpenAI]:
    with sdk(strict) as client:
        yield client


@pytest.fixture(scope="module")
def lenient_sdk(lenient: SimServer) -> Iterator[openai.OpenAI]:
    with sdk(lenient) as client:
        yield client


strict_http = http_fixture("strict")


def create(client: openai.OpenAI, **kwargs: Any) -> ChatCompletion:
    kwargs.setdefault("messages", MESSAGES)
    completion: ChatCompletion = client.chat.completions.create(model="test-model", **kwargs)
    return completion


def pick_server(
    schema: dict[str, Any], strict_sdk: openai.OpenAI, lenient_sdk: openai.OpenAI
) -> tuple[openai.OpenAI, ChatCompletion]:
    """The strict server when the schema passes the tool whitelist, else the lenient one.

    A whitelist failure must be a 400 `Tool validation failed: ...` naming `tools`.
    """
    tools = [tool("fn", schema)]
    try:
        return strict_sdk, create(strict_sdk, tools=tools, tool_choice="required")
    except openai.BadRequestError as error:
        assert error.status_code == 400
        assert isinstance(error.body, dict), error.body
        assert error.body["message"].startswith(TOOL_VALIDATION_PREFIX), error.body
        assert error.body["param"] == "tools", error.body
        return lenient_sdk, create(lenient_sdk, tools=tools, tool_choice="required")


def check_tool_completion(
    completion: ChatCompletion,
    names: set[str],
    counter: httpx.Client | None = None,
    named: bool = False,
) -> list[ChatCompletionMessageToolCall]:
    """A forced tool-calling answer: empty content, typed calls with ids, usage = sum(3 + arg
    tokens) + 1, the model's end of sequence that ends its calls. As in vLLM, a call to a
    named tool finishes with "stop", one that `required` forced with "tool_calls"."""
    [choice] = completion.choices
    assert choice.finish_reason == ("stop" if named else "tool_calls")
    # A forced call has "" content (streamed, the role chunk's `"content": ""` is kept).
    assert choice.message.content == ""
    assert choice.message.role == "assistant"
    calls = choice.message.tool_calls
    assert calls, completion
    plain: list[ChatCompletionMessageToolCall] = []
    for call in calls:
        assert isinstance(call, ChatCompletionMessageToolCall), call
        assert TOOL_ID_RE.fullmatch(call.id), call.id
        assert call.type == "function"
        assert call.function.name in names
        plain.append(call)
    if counter is not None:
        assert completion.usage is not None
        # Usage counts exactly the tokens the calls stream, and the end of sequence.
        expected = EOS_TOKENS + sum(token_count(counter, c.function.arguments) for c in plain)
        assert completion.usage.completion_tokens == expected
        assert completion.usage.total_tokens == (
            completion.usage.prompt_tokens + completion.usage.completion_tokens
        )
    return plain


# ---- tool_choice "required" over the whole corpus ---------------------------------------------


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_required_arguments_validate_for_every_corpus_schema(
    path: Path,
    strict_sdk: openai.OpenAI,
    lenient_sdk: openai.OpenAI,
    strict_http: httpx.Client,
) -> None:
    schema = load_schema(path)
    client, first = pick_server(schema, strict_sdk, lenient_sdk)
    completions = [first] + [
        create(client, tools=[tool("fn", schema)], tool_choice="required")
        for _ in range(DRAWS_PER_SCHEMA - 1)
    ]
    for completion in completions:
        # One candidate tool: exactly one call, whatever the extra-call draws.
        [call] = check_tool_completion(completion, {"fn"}, strict_http)
        assert_validates(schema, json.loads(call.function.arguments), path.stem)


# Which corpus schemas the tool whitelist accepts, and the keyword or rule that fails the
# others: checked against the 400 message (extra corpus files are covered by the test above).
WHITELIST_VERDICTS: dict[str, str | None] = {
    "get_weather": None,
    "calendar_event": None,
    "flight_booking": None,
    "string_lengths": None,
    "translate_text": None,
    "user_profile_nested_optional": None,
    "matrix_arrays_of_arrays": None,
    "allof_entity": 'keyword "$defs"',
    "const_and_enum": 'keyword "const"',
    "draft4_exclusive_bool": 'keyword "$schema"',
    "linked_list_definitions": 'keyword "definitions"',
    "payment_anyof": 'keyword "anyOf"',
    "shape_oneof": 'keyword "oneOf"',
    "unique_items": 'keyword "uniqueItems"',
    "geo_route_tuples": 'keyword "prefixItems"',
    "smart_home": 'keyword "multipleOf"',
    "nullable_fields": "must be a single type name, not an array",
    "array_bounds": 'a schema of type "array" needs "items"',
    "k8s_deployment": "additionalProperties: must be a boolean",
}


@pytest.mark.parametrize("stem", sorted(WHITELIST_VERDICTS))
def test_whitelist_accepts_and_rejects_the_right_corpus_schemas(
    stem: str, strict_http: httpx.Client
) -> None:
    path = next((p for p in CORPUS if p.stem == stem), None)
    if path is None:
        pytest.skip(f"{stem}.json is not in the corpus")
    body = {"messages": MESSAGES, "tools": [tool("fn", load_schema(path))], "tool_choice": "none"}
    response = post(strict_http, CHAT, body)
    verdict = WHITELIST_VERDICTS[stem]
    if verdict is None:
        assert response.status_code == 200, response.text
        return
    # Validated even though tool_choice is "none".
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"].startswith(TOOL_VALIDATION_PREFIX + "tool 'fn': "), error
    assert verdict in error["message"], error
    assert error["param"] == "tools"


# ---- streamed tool calls ----------------------------------------------------------------------


def stream_final(client: openai.OpenAI, **kwargs: Any) -> tuple[ChatCompletion, list[str]]:
    """Runs the SDK's stream helper; returns the final completion and the event types seen
    (`content.delta` only for non-empty text: the role chunk's `"content": ""` is one)."""
    kwargs.setdefault("messages", MESSAGES)
    events: list[str] = []
    with client.chat.completions.stream(model="test-model", **kwargs) as stream:
        for event in stream:
            if event.type != "content.delta" or event.delta:
                events.append(event.type)
        final = stream.get_final_completion()
    return final, events


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_streamed_calls_reassemble_through_the_sdk_and_validate(
    path: Path,
    strict_sdk: openai.OpenAI,
    lenient_sdk: openai.OpenAI,
    strict_http: httpx.Client,
) -> None:
    schema = load_schema(path)
    client, _ = pick_server(schema, strict_sdk, lenient_sdk)
    final, events = stream_final(
        client,
        tools=[tool("fn", schema)],
        tool_choice="required",
        stream_options={"include_usage": True},
    )
    [call] = check_tool_completion(final, {"fn"}, strict_http)
    assert_validates(schema, json.loads(call.function.arguments), path.stem)
    assert "tool_calls.function.arguments.delta" in events
    assert events.count("tool_calls.function.arguments.done") == 1
    assert "content.delta" not in events


def test_stream_helper_reassembles_several_calls(strict_sdk: openai.OpenAI) -> None:
    tools = [WEATHER, TIME, SEARCH]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for _ in range(40):
        final, events = stream_final(strict_sdk, tools=tools, tool_choice="required")
        calls = check_tool_completion(final, set(schemas))
        if len(calls) >= 2:
            break
    else:
        pytest.fail("40 required requests with 3 tools never made two calls (p = 0.45 each)")
    assert events.count("tool_calls.function.arguments.done") == len(calls)
    assert len({call.id for call in calls}) == len(calls)
    for call in calls:
        assert_validates(schemas[call.function.name], json.loads(call.function.arguments))


def test_non_ascii_and_escaped_arguments_survive_streaming(
    strict_sdk: openai.OpenAI, strict_http: httpx.Client
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "enum": ["café <b>&amp;", "日本 語 🎌", 'a"b\\c\n|x']},
            "p": {"type": "string", "pattern": "^[α-ω]{3}$"},
        },
        "required": ["s", "p"],
    }
    seen = set()
    for _ in range(20):
        final, _ = stream_final(
            strict_sdk,
            tools=[tool("ü_tool", schema)],
            tool_choice="required",
            stream_options={"include_usage": True},
        )
        [call] = check_tool_completion(final, {"ü_tool"}, strict_http)
        arguments = json.loads(call.function.arguments)
        assert_validates(schema, arguments)
        seen.add(arguments["s"])
    assert len(seen) == 3, seen


def test_streamed_delta_shape_is_openais(strict_http: httpx.Client) -> None:
    """First chunk of a call: index, id, type, name and the first piece; later chunks: index
    and argument text only, each beside a null content; then the end-of-sequence chunk, an
    empty delta that carries the finish, `tool_calls`."""
    tools = [WEATHER, TIME, SEARCH]
    body = {
        "messages": MESSAGES,
        "tools": tools,
        "tool_choice": "required",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for _ in range(40):
        sse = parse_sse(post(strict_http, CHAT, body).content)
        calls_seen = {
            entry["index"]
            for chunk in sse.chunks
            for choice in chunk["choices"]
            for entry in choice["delta"].get("tool_calls", [])
        }
        if len(calls_seen) >= 2:
            break
    else:
        pytest.fail("never saw a streamed response with two calls")
    chunks = sse.chunks
    role, *middle, usage_chunk = chunks
    assert role["choices"][0]["delta"]["role"] == "assistant"
    *middle, finish = middle
    [last] = finish["choices"]
    assert last["delta"] == {}, "the end of sequence says nothing"
    assert (last["finish_reason"], last["stop_reason"]) == ("tool_calls", None)
    assert usage_chunk["choices"] == []
    calls: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    pieces: dict[int, int] = {}
    for chunk in middle:
        [choice] = chunk["choices"]
        assert choice["finish_reason"] is None
        assert set(choice) == {"index", "delta", "logprobs", "finish_reason", "token_ids"}
        delta = choice["delta"]
        # vLLM's tool-call deltas carry a null content beside the calls, never text.
        assert set(delta) == {"content", "tool_calls"} and delta["content"] is None, delta
        [entry] = delta["tool_calls"]
        index = entry["index"]
        if index not in calls:
            assert set(entry) == {"index", "id", "type", "function"}, entry
            assert set(entry["function"]) == {"name", "arguments"}, entry
            assert TOOL_ID_RE.fullmatch(entry["id"]) and entry["type"] == "function"
            calls[index] = {"id": entry["id"], "name": entry["function"]["name"], "arguments": ""}
            order.append(index)
            pieces[index] = 0
        else:
            assert set(entry) == {"index", "function"}, entry
            assert set(entry["function"]) == {"arguments"}, entry
            assert order[-1] == index, "calls are streamed one after another"
        assert entry["function"]["arguments"], "every chunk carries argument text"
        calls[index]["arguments"] += entry["function"]["arguments"]
        pieces[index] += 1
    assert order == list(range(len(order)))
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    expected_tokens = 0
    for index in order:
        call = calls[index]
        assert_validates(schemas[call["name"]], json.loads(call["arguments"]))
        # One argument token per chunk.
        assert pieces[index] == token_count(strict_http, call["arguments"])
        expected_tokens += pieces[index]
    assert usage_chunk["usage"]["completion_tokens"] == expected_tokens + EOS_TOKENS


def test_each_choice_streams_its_own_calls_without_logprobs(strict_http: httpx.Client) -> None:
    body = {
        "messages": MESSAGES,
        "tools": [WEATHER],
        "tool_choice": "required",
        "n": 3,
        "logprobs": True,
        "top_logprobs": 2,
    }
    response = post(strict_http, CHAT, body)
    assert response.status_code == 200, response.text
    choices = response.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    for choice in choices:
        assert choice["finish_reason"] == "tool_calls" and choice["logprobs"] is None
        assert len(choice["message"]["tool_calls"]) == 1
    sse = parse_sse(post(strict_http, CHAT, {**body, "stream": True}).content)
    per_choice: dict[int, list[dict[str, Any]]] = {}
    for chunk in sse.chunks:
        [choice] = chunk["choices"]
        assert choice["logprobs"] is None
        per_choice.setdefault(choice["index"], []).append(choice)
    assert sorted(per_choice) == [0, 1, 2]
    ids = set()
    for choices_of_one in per_choice.values():
        role, first, *rest, eos = choices_of_one
        assert role["delta"]["role"] == "assistant"
        [entry] = first["delta"]["tool_calls"]
        assert entry["index"] == 0 and entry["function"]["name"] == "get_weather"
        ids.add(entry["id"])
        arguments = entry["function"]["arguments"] + "".join(
            c["delta"]["tool_calls"][0]["function"]["arguments"] for c in rest
        )
        for chunk in rest:
            [later] = chunk["delta"]["tool_calls"]
            assert set(later) == {"index", "function"} and later["index"] == 0, later
            assert set(later["function"]) == {"arguments"}, later
        assert_validates(WEATHER["function"]["parameters"], json.loads(arguments))
        # The argument chunks carry no finish: the end of sequence after them does.
        assert [c["finish_reason"] for c in (first, *rest)] == [None] * (len(rest) + 1)
        assert (eos["delta"], eos["finish_reason"]) == ({}, "tool_calls")
    assert len(ids) == 3, "every choice has its own call id"


def test_non_streamed_message_shape(strict_http: httpx.Client) -> None:
    body = {"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required"}
    response = post(strict_http, CHAT, body)
    assert response.status_code == 200, response.text
    [choice] = response.json()["choices"]
    message = choice["message"]
    assert set(message) == MESSAGE_KEYS | {"tool_calls"}
    assert message["content"] == "" and message["role"] == "assistant"
    [call] = message["tool_calls"]
    assert set(call) == {"id", "type", "function"}, "non-streamed calls carry no index"
    assert set(call["function"]) == {"name", "arguments"}
    assert call["function"]["name"] == "get_weather"
    assert TOOL_ID_RE.fullmatch(call["id"])
    assert choice["finish_reason"] == "tool_calls"
    assert choice["stop_reason"] is None


# ---- none, named, auto ------------------------------------------------------------------------


def test_none_never_calls(strict_sdk: openai.OpenAI) -> None:
    for _ in range(100):
        completion = create(strict_sdk, tools=[WEATHER, TIME], tool_choice="none")
        [choice] = completion.choices
        assert choice.message.tool_calls is None
        assert isinstance(choice.message.content, str) and choice.message.content
        assert choice.finish_reason in ("stop", "length")


@pytest.mark.parametrize("name", ["get_weather", "get_time", "search"])
def test_named_tool_is_always_the_one_called(
    name: str, strict_sdk: openai.OpenAI, strict_http: httpx.Client
) -> None:
    tools = [WEATHER, TIME, SEARCH]
    [schema] = [t["function"]["parameters"] for t in tools if t["function"]["name"] == name]
    choice: Any = {"type": "function", "function": {"name": name}}
    for i in range(25):
        completion = create(strict_sdk, tools=tools, tool_choice=choice)
        # A named choice has one candidate: exactly one call.
        [call] = check_tool_completion(
            completion, {name}, strict_http if i == 0 else None, named=True
        )
        assert_validates(schema, json.loads(call.function.arguments))


def test_named_tool_in_the_flat_form(strict_http: httpx.Client) -> None:
    body = {
        "messages": MESSAGES,
        "tools": [WEATHER, TIME],
        "tool_choice": {"type": "function", "name": "get_time"},
    }
    for _ in range(10):
        response = post(strict_http, CHAT, body)
        assert response.status_code == 200, response.text
        [choice] = response.json()["choices"]
        calls = choice["message"]["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["get_time"]
        assert (choice["finish_reason"], choice["message"]["content"]) == ("stop", "")
    # Streamed, the finish rides on the end of sequence after the call, "stop" as well.
    sse = parse_sse(post(strict_http, CHAT, {**body, "stream": True}).content)
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in sse.chunks]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert sse.chunks[-1]["choices"][0]["delta"] == {}
    assert "tool_calls" in sse.chunks[-2]["choices"][0]["delta"]


def _binomial_bounds(n: int, p: float, sigmas: float = 4.5) -> tuple[float, float]:
    spread = sigmas * math.sqrt(n * p * (1 - p))
    return n * p - spread, n * p + spread


def test_auto_calls_with_the_extra_call_probability(strict_sdk: openai.OpenAI) -> None:
    """Under auto the first call is itself an extra-call draw: P(>= 1 call) = 45 %, and a
    second call (two tools) follows with 45 % again."""
    requests = 400
    calls_per_request = []
    for _ in range(requests):
        completion = create(strict_sdk, tools=[WEATHER, TIME], tool_choice="auto")
        [choice] = completion.choices
        calls = choice.message.tool_calls or []
        if calls:
            assert choice.finish_reason == "tool_calls" and choice.message.content is None
        else:
            assert isinstance(choice.message.content, str) and choice.message.content
            assert choice.finish_reason in ("stop", "length")
        calls_per_request.append(len(calls))
    calling = sum(1 for n in calls_per_request if n > 0)
    low, high = _binomial_bounds(requests, 0.45)
    assert low <= calling <= high, calling
    assert max(calls_per_request) <= 2, "never more calls than candidate tools"
    doubles = sum(1 for n in calls_per_request if n == 2)
    low, high = _binomial_bounds(calling, 0.45)
    assert low <= doubles <= high, (doubles, calling)


def test_absent_tool_choice_behaves_as_auto(strict_sdk: openai.OpenAI) -> None:
    outcomes = [
        bool(create(strict_sdk, tools=[WEATHER]).choices[0].message.tool_calls) for _ in range(100)
    ]
    low, high = _binomial_bounds(100, 0.45)
    assert low <= sum(outcomes) <= high, sum(outcomes)


def test_auto_never_calls_with_extra_call_probability_zero(no_extra: SimServer) -> None:
    with sdk(no_extra) as client:
        for _ in range(100):
            completion = create(client, tools=[WEATHER, TIME, SEARCH], tool_choice="auto")
            [choice] = completion.choices
            assert choice.message.tool_calls is None
            assert isinstance(choice.message.content, str) and choice.message.content


def test_required_makes_exactly_one_call_with_extra_call_probability_zero(
    no_extra: SimServer,
) -> None:
    tools = [WEATHER, TIME, SEARCH, tool("a", {"type": "object", "properties": {}})]
    names = {t["function"]["name"] for t in tools}
    seen: set[str] = set()
    with sdk(no_extra) as client:
        for _ in range(60):
            [call] = check_tool_completion(
                create(client, tools=tools, tool_choice="required"), names
            )
            seen.add(call.function.name)
    assert seen == names, "the tool is picked uniformly among the candidates"
