"""POST /v1/responses end to end: the `openai` SDK (create, stream helper, parse) and the wire."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseInputParam,
    ResponseOutputMessage,
    ResponseOutputText,
    ToolParam,
)
from openai.types.responses.response_create_params import ToolChoice

from tests.support.errors import assert_openai_error, assert_validation_error
from tests.support.fixtures import openai_fixture
from tests.support.http import EOS_TOKENS, ascii_tokens, is_bank_text, logprob
from tests.support.named_sse import (
    CALL_ID,
    FC_ID,
    LOGPROBS_INCLUDE,
    RESPONSES,
    TEXT_EVENTS,
    TIME_TOOL,
    TOOL_EVENTS,
    UNITS,
    WEATHER_TOOL,
    Event,
    collapse,
    jsonschema,
    names,
    of,
    one,
    request_id_of,
    stream_events,
)
from tests.support.server import SimServer

TOOLS = cast("list[ToolParam]", [WEATHER_TOOL])
TWO_TOOLS = cast("list[ToolParam]", [WEATHER_TOOL, TIME_TOOL])
PROMPT = "What is the weather in Paris?"


client = openai_fixture("sim")


echo = openai_fixture("echo_sim")


def only_message(response: openai.types.responses.Response) -> ResponseOutputMessage:
    assert len(response.output) == 1, response.output
    item = response.output[0]
    assert isinstance(item, ResponseOutputMessage), item
    return item


def only_text(response: openai.types.responses.Response) -> ResponseOutputText:
    [part] = only_message(response).content
    assert isinstance(part, ResponseOutputText), part
    return part


def only_call(response: openai.types.responses.Response) -> ResponseFunctionToolCall:
    assert len(response.output) == 1, response.output
    item = response.output[0]
    assert isinstance(item, ResponseFunctionToolCall), item
    return item


def check_call(call: ResponseFunctionToolCall, name: str | None = None) -> dict[str, Any]:
    """fc_<16 hex> / call_<the same>, completed, arguments valid for the schema."""
    fc, cid = FC_ID.fullmatch(call.id or ""), CALL_ID.fullmatch(call.call_id)
    assert fc is not None and cid is not None, (call.id, call.call_id)
    assert fc.group(1) == cid.group(1)
    assert call.status == "completed"
    assert call.type == "function_call"
    if name is not None:
        assert call.name == name
    arguments = json.loads(call.arguments)
    assert isinstance(arguments, dict)
    assert call.arguments == json.dumps(arguments, separators=(",", ":"), sort_keys=True)
    schema = {"get_weather": WEATHER_TOOL, "get_time": TIME_TOOL}[call.name]["parameters"]
    jsonschema.validate(arguments, schema)
    return arguments


# ------------------------------------------------------------------------ create: text
def test_create_plain(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.responses.create(model=sim.model, input=PROMPT)
    rid = request_id_of(reply.id, "resp_")
    assert reply.object == "response"
    assert reply.model == sim.model
    assert reply.status == "completed"
    assert reply.error is None and reply.incomplete_details is None
    assert reply.tools == [] and reply.tool_choice == "auto"
    assert reply.text is None  # echoed from the request, which set none
    message = only_message(reply)
    assert message.id == f"msg_{rid}"
    assert message.role == "assistant" and message.status == "completed"
    part = only_text(reply)
    assert part.type == "output_text" and part.annotations == []
    assert part.logprobs is None  # not asked for
    assert is_bank_text(part.text) and part.text
    assert reply.output_text == part.text
    usage = reply.usage
    assert usage is not None
    # The model ended it: its end-of-sequence token counts, though it has no text.
    assert usage.output_tokens == len(ascii_tokens(part.text)) + EOS_TOKENS
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0


# The response object's keys in vLLM 0.32's order (no `error`, no `store`).
RESPONSE_KEYS = (
    "id",
    "created_at",
    "incomplete_details",
    "instructions",
    "metadata",
    "model",
    "object",
    "output",
    "parallel_tool_calls",
    "temperature",
    "tool_choice",
    "tools",
    "top_p",
    "background",
    "max_output_tokens",
    "max_tool_calls",
    "previous_response_id",
    "prompt",
    "reasoning",
    "service_tier",
    "status",
    "text",
    "top_logprobs",
    "truncation",
    "usage",
    "user",
    "input_messages",
    "output_messages",
    "frequency_penalty",
    "presence_penalty",
    "kv_transfer_params",
    "ec_transfer_params",
)


def test_response_keys_and_defaults_are_vllms(http: httpx.Client, sim: SimServer) -> None:
    body = http.post(RESPONSES, json={"input": "hi", "max_output_tokens": 5}).json()
    assert tuple(body) == RESPONSE_KEYS
    assert body["background"] is False and body["parallel_tool_calls"] is True
    assert body["service_tier"] == "auto" and body["truncation"] == "disabled"
    assert body["metadata"] is None and body["text"] is None and body["instructions"] is None
    for key in ("max_tool_calls", "previous_response_id", "prompt", "reasoning", "user"):
        assert body[key] is None, key
    assert body["input_messages"] is None and body["output_messages"] is None
    assert body["frequency_penalty"] == 0.0 and body["presence_penalty"] == 0.0
    assert body["kv_transfer_params"] is None and body["ec_transfer_params"] is None
    assert body["top_logprobs"] is None  # no logprobs asked for
    assert body["max_output_tokens"] == 5
    unbounded = http.post(RESPONSES, json={"input": "hi"}).json()
    # vLLM reports the max_tokens it sampled with: the room left in the context.
    assert unbounded["max_output_tokens"] == 1024 - unbounded["usage"]["input_tokens"]


def test_response_echoes_request_options(http: httpx.Client) -> None:
    text = {"format": {"type": "json_object"}}
    options = {
        "metadata": {"k": "v"},
        "text": text,
        "parallel_tool_calls": False,
        "max_tool_calls": 3,
        "reasoning": {"effort": "low"},
        "service_tier": "flex",
        "truncation": "auto",
        "user": "u-1",
        "include": [LOGPROBS_INCLUDE],
        "top_logprobs": 2,
    }
    body = http.post(RESPONSES, json={"input": "hi", "max_output_tokens": 5, **options}).json()
    for key, value in options.items():
        if key not in ("include", "reasoning"):
            assert body[key] == value, key
    # vLLM's reasoning object, every key of it.
    assert body["reasoning"] == {
        "context": None,
        "effort": "low",
        "generate_summary": None,
        "mode": None,
        "summary": None,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [("service_tier", "gold"), ("truncation", "never"), ("store", "yes"), ("user", 3)],
)
def test_typed_options_are_checked(http: httpx.Client, field: str, value: object) -> None:
    # vLLM 0.32's validation error, located under `body`: a value outside a Literal
    # (service_tier, truncation) as much as a wrong type.
    response = http.post(RESPONSES, json={"input": "hi", field: value})
    assert_validation_error(response, f"body.{field}")


def test_prompt_templates_and_background_are_refused(http: httpx.Client) -> None:
    prompt = http.post(RESPONSES, json={"input": "hi", "prompt": {"id": "pmpt_1"}})
    assert_openai_error(prompt, 400, "prompt template is not supported", param="prompt")
    background = http.post(RESPONSES, json={"input": "hi", "background": True})
    assert_openai_error(background, 400, param="background", contains="STORE=1")
    unstored = http.post(RESPONSES, json={"input": "hi", "background": True, "store": False})
    assert_openai_error(
        unstored, 400, "background can only be used when `store` is true", param="background"
    )


def test_usage_details_are_present_even_when_zero(http: httpx.Client) -> None:
    body = http.post(RESPONSES, json={"input": "hi", "max_output_tokens": 5}).json()
    usage = body["usage"]
    assert usage["input_tokens_details"] == {
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "input_tokens_per_turn": [],
        "cached_tokens_per_turn": [],
    }
    assert usage["output_tokens_details"] == {
        "reasoning_tokens": 0,
        "tool_output_tokens": 0,
        "output_tokens_per_turn": [],
        "tool_output_tokens_per_turn": [],
    }
    assert set(usage) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }


def test_string_and_message_input_count_the_same(client: openai.OpenAI, sim: SimServer) -> None:
    as_string = client.responses.create(model=sim.model, input=PROMPT, max_output_tokens=3)
    as_items = client.responses.create(
        model=sim.model,
        input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}
        ],
        max_output_tokens=3,
    )
    assert as_string.usage is not None and as_items.usage is not None
    assert as_string.usage.input_tokens == as_items.usage.input_tokens
    longer = client.responses.create(
        model=sim.model, input=PROMPT + " And tomorrow, in Rome?", max_output_tokens=3
    )
    assert longer.usage is not None
    assert longer.usage.input_tokens > as_string.usage.input_tokens


def test_echoes_request_fields(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.responses.create(
        model=sim.model,
        input="hi",
        instructions="Be brief.",
        max_output_tokens=9,
        metadata={"k": "v"},
        temperature=0.5,
        top_p=0.25,
    )
    assert reply.instructions == "Be brief."
    assert reply.max_output_tokens == 9
    assert reply.metadata == {"k": "v"}
    assert reply.temperature == 0.5 and reply.top_p == 0.25


def test_cut_by_max_output_tokens_is_incomplete(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.responses.create(
        model=sim.model, input="hi", max_output_tokens=4, extra_body={"ignore_eos": True}
    )
    assert reply.status == "incomplete"
    assert reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"
    # vLLM marks the cut message itself completed: only the response says incomplete.
    assert only_message(reply).status == "completed"
    assert reply.usage is not None and reply.usage.output_tokens == 4
    assert len(ascii_tokens(only_text(reply).text)) == 4


def test_status_follows_the_finish_in_random_mode(client: openai.OpenAI, sim: SimServer) -> None:
    seen = set()
    for _ in range(20):  # about 40% are cut at 3 tokens: both outcomes show up
        reply = client.responses.create(model=sim.model, input="hi", max_output_tokens=3)
        assert reply.usage is not None
        text_tokens = len(ascii_tokens(only_text(reply).text))
        cut = text_tokens == 3
        # A finished answer also counts its end of sequence, within the 3 tokens.
        assert reply.usage.output_tokens == text_tokens + (0 if cut else EOS_TOKENS) <= 3
        assert reply.status == ("incomplete" if cut else "completed"), reply
        assert only_message(reply).status == "completed"  # the cut is the response's status
        assert (reply.incomplete_details is not None) == cut
        seen.add(reply.status)
    assert seen == {"completed", "incomplete"}


@pytest.mark.parametrize("value", ["", []], ids=["empty-string", "empty-array"])
def test_empty_input_is_accepted(http: httpx.Client, value: object) -> None:
    body = http.post(RESPONSES, json={"input": value}).json()
    assert body["status"] == "completed"
    assert is_bank_text(body["output"][0]["content"][0]["text"])


# ------------------------------------------------------------------------ create: tools
@pytest.mark.parametrize(
    "tool_choice",
    [None, "auto", "required"],
    ids=["omitted", "auto", "required"],
)
def test_tools_give_exactly_one_function_call(
    client: openai.OpenAI, sim: SimServer, tool_choice: str | None
) -> None:
    extra: dict[str, Any] = {} if tool_choice is None else {"tool_choice": tool_choice}
    names_seen = set()
    for _ in range(6):
        reply = client.responses.create(model=sim.model, input=PROMPT, tools=TWO_TOOLS, **extra)
        call = only_call(reply)
        check_call(call)
        names_seen.add(call.name)
        assert reply.status == "completed" and reply.output_text == ""
        assert reply.usage is not None
        # 3 framing tokens per call, the arguments, then the end of sequence.
        assert reply.usage.output_tokens == len(ascii_tokens(call.arguments)) + EOS_TOKENS
        assert reply.tool_choice == (tool_choice or "auto")
        assert [t.type for t in reply.tools] == ["function", "function"]
    assert names_seen <= {"get_weather", "get_time"}


def test_forced_function(client: openai.OpenAI, sim: SimServer) -> None:
    for _ in range(4):
        reply = client.responses.create(
            model=sim.model,
            input=PROMPT,
            tools=TWO_TOOLS,
            tool_choice={"type": "function", "name": "get_time"},
        )
        arguments = check_call(only_call(reply), "get_time")
        assert set(arguments) == {"zone", "hours"}


def test_nested_chat_shaped_tool(http: httpx.Client) -> None:
    nested = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "w",
            "parameters": WEATHER_TOOL["parameters"],
        },
    }
    body = http.post(RESPONSES, json={"input": PROMPT, "tools": [nested]}).json()
    [item] = body["output"]
    assert item["type"] == "function_call" and item["name"] == "get_weather"


def test_weather_arguments(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.responses.create(model=sim.model, input=PROMPT, tools=TOOLS)
    arguments = check_call(only_call(reply), "get_weather")
    assert isinstance(arguments["city"], str)
    assert arguments.get("unit", UNITS[0]) in UNITS


def test_tool_choice_none_answers_with_a_message(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.responses.create(model=sim.model, input=PROMPT, tools=TOOLS, tool_choice="none")
    assert is_bank_text(only_text(reply).text)


@pytest.mark.parametrize(
    "tool_choice",
    [
        {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "get_time"}],
        },
        {"type": "custom", "name": "get_weather"},
    ],
    ids=["allowed_tools", "custom"],
)
def test_unenforced_choices_are_random(
    client: openai.OpenAI, sim: SimServer, tool_choice: dict[str, Any]
) -> None:
    kinds = []
    for _ in range(30):
        reply = client.responses.create(
            model=sim.model,
            input=PROMPT,
            tools=TWO_TOOLS,
            tool_choice=cast(ToolChoice, tool_choice),
        )
        assert len(reply.output) == 1
        kinds.append(reply.output[0].type)
        if kinds[-1] == "function_call":
            check_call(only_call(reply))
    assert set(kinds) == {"function_call", "message"}, kinds


def follow_up(call: ResponseFunctionToolCall, *more: dict[str, Any]) -> ResponseInputParam:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": PROMPT},
        {
            "type": "function_call",
            "id": call.id,
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'},
        *more,
    ]
    return cast(ResponseInputParam, items)


def test_function_call_output_follow_up_is_a_message(client: openai.OpenAI, sim: SimServer) -> None:
    first = client.responses.create(model=sim.model, input=PROMPT, tools=TOOLS)
    call = only_call(first)
    for tool_choice in ("auto", "required"):
        second = client.responses.create(
            model=sim.model,
            input=follow_up(call),
            tools=TOOLS,
            tool_choice=cast(ToolChoice, tool_choice),
        )
        assert second.status == "completed"
        assert is_bank_text(only_text(second).text)
        assert second.usage is not None and first.usage is not None
        # The history (call and output) is part of the prompt.
        assert second.usage.input_tokens > first.usage.input_tokens
    # Even a later, unrelated user turn stays a text turn once a tool answered.
    third = client.responses.create(
        model=sim.model,
        input=follow_up(call, {"role": "user", "content": "And in Rome?"}),
        tools=TOOLS,
    )
    only_text(third)


def test_function_call_without_output_still_calls(client: openai.OpenAI, sim: SimServer) -> None:
    call = only_call(client.responses.create(model=sim.model, input=PROMPT, tools=TOOLS))
    history = follow_up(call)[:2]
    again = client.responses.create(model=sim.model, input=history, tools=TOOLS)
    check_call(only_call(again))


# ------------------------------------------------------------------------ structured output
WEATHER_REPORT = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "celsius": {"type": "integer"},
        "sky": {"type": "string", "enum": ["clear", "cloudy", "rain"]},
        "alerts": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "celsius", "sky", "alerts"],
    "additionalProperties": False,
}


def test_json_schema_is_honoured_and_echoed(client: openai.OpenAI, sim: SimServer) -> None:
    for _ in range(3):
        reply = client.responses.create(
            model=sim.model,
            input=PROMPT,
            text={
                "format": {
                    "type": "json_schema",
                    "name": "report",
                    "schema": WEATHER_REPORT,
                    "strict": True,
                }
            },
        )
        jsonschema.validate(json.loads(reply.output_text), WEATHER_REPORT)
        assert reply.text is not None
        echoed = reply.text.model_dump(exclude_none=True, by_alias=True)["format"]
        assert echoed["type"] == "json_schema" and echoed["name"] == "report"
        assert echoed["schema"] == WEATHER_REPORT and echoed["strict"] is True


def test_json_object_gives_an_object(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.responses.create(
        model=sim.model, input=PROMPT, text={"format": {"type": "json_object"}}
    )
    assert isinstance(json.loads(reply.output_text), dict)
    assert reply.text is not None and reply.text.format is not None
    assert reply.text.format.type == "json_object"


class Report(pydantic.BaseModel):
    city: str
    celsius: int
    raining: bool


def test_sdk_parse_with_a_pydantic_model(client: openai.OpenAI, sim: SimServer) -> None:
    parsed = client.responses.parse(model=sim.model, input=PROMPT, text_format=Report)
    assert isinstance(parsed.output_parsed, Report)


def test_streamed_json_schema_validates(client: openai.OpenAI, sim: SimServer) -> None:
    with client.responses.stream(
        model=sim.model,
        input=PROMPT,
        text={"format": {"type": "json_schema", "name": "report", "schema": WEATHER_REPORT}},
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    jsonschema.validate(json.loads(final.output_text), WEATHER_REPORT)


# ------------------------------------------------------------------------ logprobs
def test_logprobs_with_top_alternatives(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.responses.create(
        model=sim.model,
        input="hi",
        max_output_tokens=8,
        include=[LOGPROBS_INCLUDE],
        top_logprobs=2,
    )
    part = only_text(reply)
    assert part.logprobs is not None
    assert "".join(entry.token for entry in part.logprobs) == part.text
    # A completed answer lists its end-of-sequence token last, with empty text.
    eos = EOS_TOKENS if reply.status == "completed" else 0
    assert len(part.logprobs) == len(ascii_tokens(part.text)) + eos
    if eos:
        assert part.logprobs[-1].token == ""
    for position, entry in enumerate(part.logprobs):
        assert entry.logprob == pytest.approx(logprob(position))
        assert entry.bytes == list(entry.token.encode())
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert entry.top_logprobs[1].token == f"{entry.token}_1"
        assert entry.top_logprobs[1].logprob == pytest.approx(entry.logprob - 0.5)


def test_logprobs_without_top_and_without_include(client: openai.OpenAI, sim: SimServer) -> None:
    bare = client.responses.create(
        model=sim.model, input="hi", max_output_tokens=5, include=[LOGPROBS_INCLUDE]
    )
    entries = only_text(bare).logprobs
    assert entries is not None and entries
    assert all(entry.top_logprobs == [] for entry in entries)
    off = client.responses.create(model=sim.model, input="hi", max_output_tokens=5, top_logprobs=3)
    assert only_text(off).logprobs is None


def test_streamed_logprobs(http: httpx.Client) -> None:
    body = {"input": "hi", "max_output_tokens": 8, "include": [LOGPROBS_INCLUDE], "top_logprobs": 1}
    events = stream_events(http, RESPONSES, body)
    deltas = of(events, "response.output_text.delta")
    collected = []
    for position, delta in enumerate(deltas):
        [entry] = delta["logprobs"]
        assert entry["token"] == delta["delta"]
        assert entry["logprob"] == pytest.approx(logprob(position))
        assert [alt["token"] for alt in entry["top_logprobs"]] == [delta["delta"]]
        collected.append(entry)
    # Cut at max_output_tokens or not, the stream ends with response.completed (vLLM's way).
    assert not of(events, "response.incomplete")
    last = one(events, "response.completed")
    if last["response"]["status"] == "completed":
        # The end-of-sequence token has no delta, but the answer lists its logprobs.
        position = len(deltas)
        alternative = {"token": "", "logprob": logprob(position), "bytes": []}
        collected.append({**alternative, "top_logprobs": [alternative]})
    assert last["response"]["output"][0]["content"][0]["logprobs"] == collected


# ------------------------------------------------------------------------ streaming (SDK)
def test_stream_helper_text_turn(client: openai.OpenAI, sim: SimServer) -> None:
    with client.responses.stream(model=sim.model, input=PROMPT) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert collapse(kinds) == list(TEXT_EVENTS), kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    rid = request_id_of(final.id, "resp_")
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    text = "".join(e.delta for e in deltas)
    for event in events:
        if hasattr(event, "output_index"):
            assert event.output_index == 0, event
        if hasattr(event, "content_index"):
            assert event.content_index == 0, event
        if hasattr(event, "item_id"):
            assert event.item_id == f"msg_{rid}", event
    assert deltas and deltas[-1].snapshot == text
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == text
    assert final.status == "completed"
    assert final.output_text == text and is_bank_text(text)
    assert only_message(final).id == f"msg_{rid}"
    # No delta for the end-of-sequence token, which still counts.
    assert final.usage is not None and final.usage.output_tokens == len(deltas) + EOS_TOKENS
    created = events[0]
    assert created.type == "response.created"
    assert created.response.status == "in_progress"
    assert created.response.output == [] and created.response.usage is None


def test_stream_helper_tool_turn(client: openai.OpenAI, sim: SimServer) -> None:
    with client.responses.stream(model=sim.model, input=PROMPT, tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert collapse(kinds) == list(TOOL_EVENTS), kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    call = only_call(final)
    check_call(call, "get_weather")
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    joined = "".join(e.delta for e in deltas)
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert joined == done.arguments == call.arguments
    assert deltas[-1].snapshot == joined
    assert all(e.item_id == call.id and e.output_index == 0 for e in deltas)
    # The end of sequence that follows the call counts, though no delta carries it.
    assert final.usage is not None
    assert final.usage.output_tokens == len(deltas) + EOS_TOKENS


def test_raw_sdk_stream_iteration(client: openai.OpenAI, sim: SimServer) -> None:
    stream = client.responses.create(model=sim.model, input=PROMPT, stream=True)
    kinds = [event.type for event in stream]
    assert collapse(kinds) == list(TEXT_EVENTS)


# ------------------------------------------------------------------------ streaming (wire)
def check_numbering(events: list[Event]) -> None:
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))


def test_wire_text_stream(http: httpx.Client, sim: SimServer) -> None:
    events = stream_events(http, RESPONSES, {"input": PROMPT})
    assert collapse(names(events)) == list(TEXT_EVENTS)
    check_numbering(events)
    created, in_progress = one(events, "response.created"), one(events, "response.in_progress")
    response = created["response"]
    rid = request_id_of(response["id"], "resp_")
    mid = f"msg_{rid}"
    assert response["status"] == "in_progress"
    assert response["output"] == [] and response["usage"] is None
    assert response["object"] == "response" and response["model"] == sim.model
    assert in_progress["response"] == response
    added = one(events, "response.output_item.added")
    assert added["output_index"] == 0
    assert added["item"] == {
        "type": "message",
        "id": mid,
        "role": "assistant",
        "status": "in_progress",
        "content": [],
        "phase": None,
    }
    part_added = one(events, "response.content_part.added")
    # vLLM opens the part with an empty logprobs list, asked for or not.
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    assert part_added["part"] == part
    for name in TEXT_EVENTS[3:8]:
        for data in of(events, name):
            assert data["output_index"] == 0, data
            if name != "response.output_item.done":
                assert data["item_id"] == mid and data["content_index"] == 0, data
    text = "".join(d["delta"] for d in of(events, "response.output_text.delta"))
    assert one(events, "response.output_text.done")["text"] == text
    assert one(events, "response.content_part.done")["part"]["text"] == text
    item = one(events, "response.output_item.done")["item"]
    assert item["id"] == mid and item["status"] == "completed"
    # The finished part has null logprobs, as none were asked for.
    done_part: dict[str, Any] = {
        "type": "output_text",
        "text": text,
        "annotations": [],
        "logprobs": None,
    }
    assert item["content"] == [done_part]
    assert item["phase"] is None
    final = one(events, "response.completed")["response"]
    assert final["id"] == response["id"] and final["status"] == "completed"
    assert final["output"] == [item]
    usage = final["usage"]
    deltas = of(events, "response.output_text.delta")
    assert all(delta["delta"] for delta in deltas), "no delta for the end of sequence"
    assert usage["output_tokens"] == len(deltas) + EOS_TOKENS
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_wire_tool_stream(http: httpx.Client) -> None:
    events = stream_events(http, RESPONSES, {"input": PROMPT, "tools": [WEATHER_TOOL]})
    assert collapse(names(events)) == list(TOOL_EVENTS)
    check_numbering(events)
    added = one(events, "response.output_item.added")["item"]
    assert added["type"] == "function_call" and added["status"] == "in_progress"
    assert added["arguments"] == "" and added["name"] == "get_weather"
    fc = FC_ID.fullmatch(added["id"])
    assert fc is not None and added["call_id"] == f"call_{fc.group(1)}"
    deltas = of(events, "response.function_call_arguments.delta")
    assert all(d["item_id"] == added["id"] and d["output_index"] == 0 for d in deltas)
    assert all(d["delta"] for d in deltas), "no delta for the end of sequence"
    usage = one(events, "response.completed")["response"]["usage"]
    assert usage["output_tokens"] == len(deltas) + EOS_TOKENS
    joined = "".join(d["delta"] for d in deltas)
    done = one(events, "response.function_call_arguments.done")
    assert done["arguments"] == joined and done["name"] == "get_weather"
    assert done["item_id"] == added["id"] and done["output_index"] == 0
    item = one(events, "response.output_item.done")["item"]
    assert item == {**added, "arguments": joined, "status": "completed"}
    final = one(events, "response.completed")["response"]
    assert final["output"] == [item] and final["status"] == "completed"


def test_wire_incomplete_stream(http: httpx.Client) -> None:
    """vLLM ends a stream cut by max_output_tokens with response.completed too: the
    response it carries says incomplete."""
    body = {"input": "hi", "max_output_tokens": 3, "ignore_eos": True}
    events = stream_events(http, RESPONSES, body)
    kinds = names(events)
    assert kinds[-1] == "response.completed"
    assert "response.incomplete" not in kinds
    assert collapse(kinds) == list(TEXT_EVENTS)
    check_numbering(events)
    assert len(of(events, "response.output_text.delta")) == 3
    item = one(events, "response.output_item.done")["item"]
    assert item["status"] == "completed"  # as in vLLM: the response says incomplete
    final = one(events, "response.completed")["response"]
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"] == [item] and final["usage"]["output_tokens"] == 3
    assert tuple(final) == RESPONSE_KEYS


def test_sdk_final_response_of_a_truncated_stream(client: openai.OpenAI, sim: SimServer) -> None:
    with client.responses.stream(
        model=sim.model, input="hi", max_output_tokens=2, extra_body={"ignore_eos": True}
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[-1].type == "response.completed"
    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage is not None and final.usage.output_tokens == 2
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert final.output_text == "".join(deltas) and len(deltas) == 2


# ------------------------------------------------------------------------ echo mode
def test_echo_last_message(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    reply = echo.responses.create(
        model=echo_sim.model,
        input=[
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": "Echo this back, please!"},
        ],
    )
    assert reply.output_text == "Echo this back, please!"
    assert reply.usage is not None
    assert reply.usage.output_tokens == len(ascii_tokens(reply.output_text)) + EOS_TOKENS


def test_echo_text_and_image(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    reply = echo.responses.create(
        model=echo_sim.model,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Describe"},
                    {"type": "input_image", "image_url": "https://x.test/a.png", "detail": "auto"},
                ],
            }
        ],
    )
    assert reply.output_text == "Describe\nimage: https://x.test/a.png"


def test_echo_function_call_output(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    call = ResponseFunctionToolCall(
        type="function_call", call_id="call_1", name="get_weather", arguments='{"city":"Paris"}'
    )
    reply = echo.responses.create(model=echo_sim.model, input=follow_up(call), tools=TOOLS)
    assert reply.output_text == '{"temp": 21}'


def test_echo_trailing_function_call(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    call = ResponseFunctionToolCall(
        type="function_call", call_id="call_1", name="get_weather", arguments='{"city":"Paris"}'
    )
    reply = echo.responses.create(model=echo_sim.model, input=follow_up(call)[:2])
    assert reply.output_text == 'get_weather({"city":"Paris"})'


def test_echo_streamed(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    with echo.responses.stream(model=echo_sim.model, input="Stream me, back.") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == "Stream me, back."


def test_tools_win_over_echo(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    reply = echo.responses.create(model=echo_sim.model, input=PROMPT, tools=TOOLS)
    check_call(only_call(reply), "get_weather")
