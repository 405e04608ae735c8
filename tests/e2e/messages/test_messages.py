"""POST /v1/messages end to end: the `anthropic` SDK (create, streams, errors) and the wire."""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic
import httpx
import pytest
from anthropic.lib.streaming import MessageStreamManager
from anthropic.types import (
    Message,
    MessageParam,
    TextBlock,
    TextBlockParam,
    ToolChoiceParam,
    ToolParam,
    ToolUseBlock,
)

from tests.support.errors import unknown_model_message
from tests.support.fixtures import anthropic_fixture
from tests.support.http import EOS_TOKENS, ascii_tokens, is_bank_text
from tests.support.named_sse import (
    A_PING_TOOL,
    A_TIME_TOOL,
    A_WEATHER_TOOL,
    MESSAGES,
    TOOLU_ID,
    UNITS,
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

USER: list[MessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = cast("list[ToolParam]", [A_WEATHER_TOOL])
TWO_TOOLS = cast("list[ToolParam]", [A_WEATHER_TOOL, A_TIME_TOOL])
SCHEMAS = {"get_weather": A_WEATHER_TOOL, "get_time": A_TIME_TOOL, "ping": A_PING_TOOL}
TEXT_STREAM = [
    "message_start",
    "content_block_start",
    "ping",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


client = anthropic_fixture("sim")


echo = anthropic_fixture("echo_sim")


def only_text(message: Message) -> str:
    assert len(message.content) == 1, message.content
    block = message.content[0]
    assert isinstance(block, TextBlock), block
    return block.text


def tool_uses(message: Message) -> list[ToolUseBlock]:
    blocks = []
    for block in message.content:
        assert isinstance(block, ToolUseBlock), message.content
        assert TOOLU_ID.fullmatch(block.id), block.id
        assert isinstance(block.input, dict)
        jsonschema.validate(block.input, SCHEMAS[block.name]["input_schema"])
        blocks.append(block)
    assert blocks, "a tool turn has at least one tool_use block"
    assert message.stop_reason == "tool_use"
    return blocks


def create_with_tools(
    client: anthropic.Anthropic,
    sim: SimServer,
    tools: list[ToolParam],
    tool_choice: ToolChoiceParam,
    max_tokens: int = 200,
) -> Message:
    """A message answering USER with `tools` offered under `tool_choice`."""
    return client.messages.create(
        model=sim.model, max_tokens=max_tokens, messages=USER, tools=tools, tool_choice=tool_choice
    )


def stream_with_tools(
    client: anthropic.Anthropic, sim: SimServer, tool_choice: ToolChoiceParam
) -> MessageStreamManager:
    """An SDK stream answering USER with both tools offered under `tool_choice`."""
    return client.messages.stream(
        model=sim.model, max_tokens=300, messages=USER, tools=TWO_TOOLS, tool_choice=tool_choice
    )


def check_usage(message: Message, output_tokens: int) -> None:
    usage = message.usage
    assert usage.cache_creation_input_tokens == 0 and usage.cache_read_input_tokens == 0
    assert usage.input_tokens > 0
    assert usage.output_tokens == output_tokens


def tool_output_tokens(blocks: list[ToolUseBlock]) -> int:
    """Each call's compact, sorted-key JSON arguments' tokens (the tokens it streams), then
    the answer's end-of-sequence token (which follows the calls as it follows a text)."""
    return EOS_TOKENS + sum(
        len(ascii_tokens(json.dumps(b.input, separators=(",", ":"), sort_keys=True)))
        for b in blocks
    )


# ------------------------------------------------------------------------ create: text
def test_create_plain(client: anthropic.Anthropic, sim: SimServer) -> None:
    for _ in range(8):
        message = client.messages.create(model=sim.model, max_tokens=12, messages=USER)
        request_id_of(message.id, "msg_")
        assert message.type == "message" and message.role == "assistant"
        assert message.model == sim.model
        assert message.stop_sequence is None
        text = only_text(message)
        assert is_bank_text(text) and text
        count = len(ascii_tokens(text))
        cut = count == 12
        # An end_turn answer ends with its end-of-sequence token: no text, but it counts.
        check_usage(message, count + (0 if cut else EOS_TOKENS))
        assert message.stop_reason == ("max_tokens" if cut else "end_turn")


def test_wire_shape(http: httpx.Client) -> None:
    body = http.post(MESSAGES, json={"max_tokens": 5, "messages": USER}).json()
    assert set(body) == {
        "id",
        "type",
        "role",
        "content",
        "model",
        "stop_reason",
        "stop_sequence",
        "usage",
    }
    assert set(body["usage"]) == {
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    }


def test_max_tokens_cut(client: anthropic.Anthropic, sim: SimServer) -> None:
    message = client.messages.create(
        model=sim.model, max_tokens=5, messages=USER, extra_body={"ignore_eos": True}
    )
    assert message.stop_reason == "max_tokens"
    assert len(ascii_tokens(only_text(message))) == 5
    check_usage(message, 5)


def test_system_string_or_text_blocks(client: anthropic.Anthropic, sim: SimServer) -> None:
    plain = client.messages.create(model=sim.model, max_tokens=3, messages=USER)
    as_string = client.messages.create(
        model=sim.model, max_tokens=3, messages=USER, system="You are terse."
    )
    blocks: list[TextBlockParam] = [{"type": "text", "text": "You are terse."}]
    as_blocks = client.messages.create(model=sim.model, max_tokens=3, messages=USER, system=blocks)
    assert as_string.usage.input_tokens > plain.usage.input_tokens
    assert as_blocks.usage.input_tokens == as_string.usage.input_tokens


# ------------------------------------------------------------------------ tools
def test_tool_choice_any(client: anthropic.Anthropic, sim: SimServer) -> None:
    for _ in range(5):
        message = create_with_tools(client, sim, TWO_TOOLS, {"type": "any"})
        blocks = tool_uses(message)
        check_usage(message, tool_output_tokens(blocks))


def test_weather_input(client: anthropic.Anthropic, sim: SimServer) -> None:
    message = create_with_tools(client, sim, TOOLS, {"type": "tool", "name": "get_weather"})
    [block] = tool_uses(message)
    assert isinstance(block.input, dict)
    assert isinstance(block.input["city"], str)
    assert block.input.get("unit", UNITS[0]) in UNITS


def test_tool_choice_tool_names_one_tool(client: anthropic.Anthropic, sim: SimServer) -> None:
    for _ in range(5):
        message = create_with_tools(client, sim, TWO_TOOLS, {"type": "tool", "name": "get_time"})
        [block] = tool_uses(message)
        assert block.name == "get_time"


def test_tool_choice_none_is_text(client: anthropic.Anthropic, sim: SimServer) -> None:
    for _ in range(3):
        message = create_with_tools(client, sim, TWO_TOOLS, {"type": "none"}, max_tokens=20)
        assert is_bank_text(only_text(message))
        assert message.stop_reason in ("end_turn", "max_tokens")


@pytest.mark.parametrize("tool_choice", [None, {"type": "auto"}], ids=["omitted", "auto"])
def test_tool_choice_auto_is_random(
    client: anthropic.Anthropic, sim: SimServer, tool_choice: dict[str, Any] | None
) -> None:
    extra: dict[str, Any] = {} if tool_choice is None else {"tool_choice": tool_choice}
    reasons = []
    for _ in range(30):
        message = client.messages.create(
            model=sim.model, max_tokens=20, messages=USER, tools=TWO_TOOLS, **extra
        )
        reasons.append(message.stop_reason)
        if message.stop_reason == "tool_use":
            tool_uses(message)
        else:
            only_text(message)
    assert "tool_use" in reasons and {"end_turn", "max_tokens"} & set(reasons), reasons


def test_empty_input_is_an_empty_object(client: anthropic.Anthropic, http: httpx.Client) -> None:
    body = {
        "max_tokens": 50,
        "messages": USER,
        "tools": [A_PING_TOOL],
        "tool_choice": {"type": "tool", "name": "ping"},
    }
    raw = http.post(MESSAGES, json=body).json()
    [block] = raw["content"]
    assert block["type"] == "tool_use" and block["input"] == {}
    events = stream_events(http, MESSAGES, body)
    start = one(events, "content_block_start")["content_block"]
    assert start["type"] == "tool_use" and start["input"] == {}
    partial = "".join(d["delta"]["partial_json"] for d in of(events, "content_block_delta"))
    assert json.loads(partial) == {}


def tool_history(tool_use_id: str) -> list[MessageParam]:
    return [
        *USER,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": tool_use_id,
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": tool_use_id, "content": "21 degrees"},
            ],
        },
    ]


def test_tool_result_history_keeps_tools(client: anthropic.Anthropic, sim: SimServer) -> None:
    first = create_with_tools(client, sim, TOOLS, {"type": "any"})
    [block] = tool_uses(first)[:1]
    again = client.messages.create(
        model=sim.model,
        max_tokens=200,
        messages=tool_history(block.id),
        tools=TOOLS,
        tool_choice={"type": "any"},
    )
    tool_uses(again)
    # The history is in the prompt.
    assert again.usage.input_tokens > first.usage.input_tokens


# ------------------------------------------------------------------------ SDK streams
def test_stream_text(client: anthropic.Anthropic, sim: SimServer) -> None:
    with client.messages.stream(model=sim.model, max_tokens=30, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert only_text(final) == text and is_bank_text(text)
    count = len(ascii_tokens(text))
    cut = count == 30
    assert final.usage.output_tokens == count + (0 if cut else EOS_TOKENS)
    assert final.stop_reason == ("max_tokens" if cut else "end_turn")
    plain = client.messages.create(model=sim.model, max_tokens=1, messages=USER)
    assert final.usage.input_tokens == plain.usage.input_tokens


def test_stream_events_through_the_sdk(client: anthropic.Anthropic, sim: SimServer) -> None:
    with client.messages.stream(
        model=sim.model, max_tokens=6, messages=USER, extra_body={"ignore_eos": True}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    # The SDK adds its own "text" event after each text delta.
    assert [k for k in kinds if k != "text"] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 6,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert kinds.count("text") == 6
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6


def test_stream_tools(client: anthropic.Anthropic, sim: SimServer) -> None:
    with stream_with_tools(client, sim, {"type": "any"}) as stream:
        partial: dict[int, str] = {}
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
        final = stream.get_final_message()
    blocks = tool_uses(final)
    assert sorted(partial) == list(range(len(blocks)))
    for index, block in enumerate(blocks):
        assert json.loads(partial[index]) == block.input
    assert final.usage.output_tokens == tool_output_tokens(blocks)


def test_stream_named_tool(client: anthropic.Anthropic, sim: SimServer) -> None:
    with stream_with_tools(client, sim, {"type": "tool", "name": "get_weather"}) as stream:
        assert "".join(stream.text_stream) == ""
        final = stream.get_final_message()
    [block] = tool_uses(final)
    assert block.name == "get_weather"


# ------------------------------------------------------------------------ wire streams
def test_wire_text_stream(http: httpx.Client, sim: SimServer) -> None:
    events = stream_events(http, MESSAGES, {"max_tokens": 40, "messages": USER})
    assert collapse(names(events)) == TEXT_STREAM
    start = one(events, "message_start")["message"]
    request_id_of(start["id"], "msg_")
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["model"] == sim.model and start["stop_sequence"] is None
    assert start["usage"]["output_tokens"] == 0
    assert start["usage"]["cache_creation_input_tokens"] == 0
    assert start["usage"]["cache_read_input_tokens"] == 0
    assert one(events, "content_block_start") == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    deltas = of(events, "content_block_delta")
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for d in deltas)
    text = "".join(d["delta"]["text"] for d in deltas)
    assert is_bank_text(text)
    assert one(events, "content_block_stop") == {"type": "content_block_stop", "index": 0}
    delta = one(events, "message_delta")
    # The end-of-sequence token sends no text delta but counts in output_tokens.
    assert all(d["delta"]["text"] for d in deltas)
    cut = len(deltas) == 40
    # vLLM's message_delta usage repeats the prompt's count beside the output's.
    assert delta["usage"] == {
        "input_tokens": start["usage"]["input_tokens"],
        "output_tokens": len(deltas) + (0 if cut else EOS_TOKENS),
    }
    assert delta["delta"] == {
        "stop_reason": "max_tokens" if cut else "end_turn",
        "stop_sequence": None,
    }
    assert one(events, "message_stop") == {"type": "message_stop"}
    plain = http.post(MESSAGES, json={"max_tokens": 1, "messages": USER}).json()
    assert start["usage"]["input_tokens"] == plain["usage"]["input_tokens"]


def test_wire_tool_stream(http: httpx.Client) -> None:
    body = {
        "max_tokens": 400,
        "messages": USER,
        "tools": [A_WEATHER_TOOL, A_TIME_TOOL],
        "tool_choice": {"type": "any"},
    }
    for _ in range(4):
        check_tool_stream(stream_events(http, MESSAGES, body))


def check_tool_stream(events: list[Event]) -> None:
    kinds = names(events)
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    starts = of(events, "content_block_start")
    stops = of(events, "content_block_stop")
    assert [s["index"] for s in starts] == list(range(len(starts))) and starts
    assert [s["index"] for s in stops] == list(range(len(starts)))
    current = -1
    joined: dict[int, str] = {}
    total = EOS_TOKENS  # the end of sequence after the calls: counted, never streamed
    for event in events[2:-2]:
        if event.name == "content_block_start":
            current = event.data["index"]
            block = event.data["content_block"]
            assert block["type"] == "tool_use" and block["input"] == {}
            assert TOOLU_ID.fullmatch(block["id"])
            joined[current] = ""
        elif event.name == "content_block_delta":
            assert event.data["index"] == current
            assert event.data["delta"]["type"] == "input_json_delta"
            joined[current] += event.data["delta"]["partial_json"]
            total += 1
        else:
            assert event.name == "content_block_stop" and event.data["index"] == current
    for index, start in enumerate(starts):
        arguments = json.loads(joined[index])
        assert isinstance(arguments, dict)
        name = start["content_block"]["name"]
        jsonschema.validate(arguments, SCHEMAS[name]["input_schema"])
    delta = one(events, "message_delta")
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] == total
    assert delta["usage"]["input_tokens"] == events[0].data["message"]["usage"]["input_tokens"]


def test_stream_and_create_agree_on_usage(echo_http: httpx.Client) -> None:
    body = {"max_tokens": 50, "messages": [{"role": "user", "content": "One, two and three."}]}
    plain = echo_http.post(MESSAGES, json=body).json()
    events = stream_events(echo_http, MESSAGES, body)
    assert one(events, "message_delta")["usage"]["output_tokens"] == plain["usage"]["output_tokens"]
    start = one(events, "message_start")["message"]
    assert start["usage"]["input_tokens"] == plain["usage"]["input_tokens"]
    text = "".join(d["delta"]["text"] for d in of(events, "content_block_delta"))
    assert text == plain["content"][0]["text"] == "One, two and three."


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequences_end_the_answer(echo_http: httpx.Client, stream: bool) -> None:
    # Echo mode makes the text known: the answer stops before the first stop sequence it
    # meets (which is not shown), and says which one it was.
    text = "One, two and three."
    body = {
        "max_tokens": 50,
        "messages": [{"role": "user", "content": text}],
        "stop_sequences": ["absent", " and"],
    }
    if stream:
        events = stream_events(echo_http, MESSAGES, body)
        answer = "".join(d["delta"]["text"] for d in of(events, "content_block_delta"))
        delta = one(events, "message_delta")
        stop_reason, stop_sequence = delta["delta"]["stop_reason"], delta["delta"]["stop_sequence"]
        output_tokens = delta["usage"]["output_tokens"]
    else:
        reply = echo_http.post(MESSAGES, json=body).json()
        answer = reply["content"][0]["text"]
        stop_reason, stop_sequence = reply["stop_reason"], reply["stop_sequence"]
        output_tokens = reply["usage"]["output_tokens"]
    assert answer == "One, two"
    assert (stop_reason, stop_sequence) == ("stop_sequence", " and")
    # The stop sequence's own token was generated, so it counts; no end of sequence follows.
    assert output_tokens == len(ascii_tokens("One, two and"))


# ------------------------------------------------------------------------ SDK errors
def test_missing_max_tokens_is_bad_request(client: anthropic.Anthropic, sim: SimServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=sim.model,
            max_tokens=cast(int, anthropic.omit),
            messages=USER,
            timeout=30,
        )
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens is required"},
    }


def test_unknown_model_is_not_found(client: anthropic.Anthropic, sim: SimServer) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="no-such-model", max_tokens=5, messages=USER)
    assert caught.value.status_code == 404
    body = cast(dict[str, Any], caught.value.body)
    assert body["error"]["type"] == "not_found_error"
    assert body["error"]["message"] == unknown_model_message("no-such-model", sim.model)


def test_unknown_model_when_streaming(client: anthropic.Anthropic) -> None:
    with (
        pytest.raises(anthropic.NotFoundError),
        client.messages.stream(model="no-such-model", max_tokens=5, messages=USER) as stream,
    ):
        stream.get_final_message()


@pytest.mark.parametrize(
    "extra",
    [
        {"messages": []},
        {"tools": TOOLS, "tool_choice": {"type": "tool", "name": "missing"}},
        {"messages": [{"role": "user", "content": [{"type": "image"}]}]},
        {"max_tokens": 0},
        {"max_tokens": 100_000},
    ],
    ids=["empty-messages", "unknown-named-tool", "image-without-source", "zero", "too-long"],
)
def test_bad_requests_raise_bad_request(
    client: anthropic.Anthropic, sim: SimServer, extra: dict[str, Any]
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        # extra_body overrides the typed fields (and skips the SDK's own max_tokens checks).
        client.messages.create(model=sim.model, max_tokens=5, messages=USER, extra_body=extra)
    body = cast(dict[str, Any], caught.value.body)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"


def test_bad_tool_choice_type(client: anthropic.Anthropic, sim: SimServer) -> None:
    with pytest.raises(anthropic.BadRequestError):
        create_with_tools(
            client, sim, TOOLS, cast(ToolChoiceParam, {"type": "sometimes"}), max_tokens=5
        )


# ------------------------------------------------------------------------ echo mode
def test_echo_last_message(echo: anthropic.Anthropic, echo_sim: SimServer) -> None:
    message = echo.messages.create(
        model=echo_sim.model,
        max_tokens=100,
        system="Ignore me.",
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "second"},
            {"role": "user", "content": [{"type": "text", "text": "Echo: me, please."}]},
        ],
    )
    assert only_text(message) == "Echo: me, please."
    assert message.stop_reason == "end_turn"
    check_usage(message, len(ascii_tokens("Echo: me, please.")) + EOS_TOKENS)


def test_echo_tool_result(echo: anthropic.Anthropic, echo_sim: SimServer) -> None:
    message = echo.messages.create(
        model=echo_sim.model, max_tokens=100, messages=tool_history("toolu_0000000001")
    )
    assert only_text(message) == "21 degrees"


def test_echo_text_and_base64_image(echo: anthropic.Anthropic, echo_sim: SimServer) -> None:
    message = echo.messages.create(
        model=echo_sim.model,
        max_tokens=100,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
                    },
                ],
            }
        ],
    )
    assert only_text(message) == "Look\nimage: data:image/png;base64,iVBORw0K"


def test_echo_system_only(echo: anthropic.Anthropic, echo_sim: SimServer) -> None:
    message = echo.messages.create(
        model=echo_sim.model, max_tokens=100, system="Only the system speaks.", messages=[]
    )
    assert only_text(message) == "Only the system speaks."


def test_echo_streamed(echo: anthropic.Anthropic, echo_sim: SimServer) -> None:
    messages: list[MessageParam] = [{"role": "user", "content": "Stream: this, back!"}]
    with echo.messages.stream(model=echo_sim.model, max_tokens=100, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == only_text(final) == "Stream: this, back!"
    assert final.stop_reason == "end_turn"
