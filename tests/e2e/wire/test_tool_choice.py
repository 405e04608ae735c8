"""How a forced tool call is reported, as vLLM reports it: a call to a named tool finishes
with "stop" (vLLM's parser did not choose it), and a forced call's message has empty, not
null, content; `auto` keeps null content and "tool_calls", as do the object choices that
name no function (`custom`, `allowed_tools`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import CHAT, json_ok, post, stream_post
from tests.support.schemas import WEATHER, user

NAMED = {"type": "function", "function": {"name": "get_weather"}}

tooled = server_fixture()
client = http_fixture("tooled")


def _body(tool_choice: Any, **extra: Any) -> dict[str, Any]:
    return {"messages": user("Weather?"), "tools": [WEATHER], "tool_choice": tool_choice, **extra}


@pytest.mark.parametrize(
    ("tool_choice", "finish", "content"),
    [(NAMED, "stop", ""), ("required", "tool_calls", "")],
)
def test_a_forced_call_is_reported_as_vllm_does(
    client: httpx.Client, tool_choice: Any, finish: str, content: str
) -> None:
    choice = json_ok(post(client, CHAT, _body(tool_choice)))["choices"][0]
    assert choice["finish_reason"] == finish
    assert choice["message"]["content"] == content
    calls = choice["message"]["tool_calls"]
    assert calls and all(call["function"]["name"] == "get_weather" for call in calls)


def test_an_auto_call_keeps_null_content(client: httpx.Client) -> None:
    for _ in range(40):
        choice = json_ok(post(client, CHAT, _body("auto")))["choices"][0]
        if choice["finish_reason"] == "tool_calls":
            assert choice["message"]["content"] is None
            return
    raise AssertionError("auto never called a tool in 40 tries")


# Object choices that name no function: vLLM treats them as auto.
CUSTOM = {"type": "custom", "custom": {"name": "get_weather"}}
ALLOWED = {
    "type": "allowed_tools",
    "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]},
}


@pytest.mark.parametrize("tool_choice", [CUSTOM, ALLOWED], ids=["custom", "allowed_tools"])
def test_an_object_choice_other_than_function_acts_as_auto(
    client: httpx.Client, tool_choice: Any
) -> None:
    """Only a function choice names a tool: the others may answer in text, and a call they
    make is reported as auto's, "tool_calls" with null content, not as a named one's."""
    finishes = set()
    for _ in range(60):
        choice = json_ok(post(client, CHAT, _body(tool_choice)))["choices"][0]
        finishes.add(choice["finish_reason"])
        if choice["finish_reason"] == "tool_calls":
            assert choice["message"]["content"] is None
            assert choice["message"]["tool_calls"]
        else:
            assert choice["message"].get("tool_calls") is None
            assert isinstance(choice["message"]["content"], str)
    # p = 0.45 of a call each time: 60 draws see both outcomes but for p < 1e-15.
    assert "tool_calls" in finishes and finishes - {"tool_calls"}, finishes


@pytest.mark.parametrize(("tool_choice", "finish"), [(NAMED, "stop"), ("required", "tool_calls")])
def test_a_streamed_call_ends_with_an_end_of_sequence_chunk(
    client: httpx.Client, tool_choice: Any, finish: str
) -> None:
    """The model ends its calls itself: after the argument chunks (a null content beside
    the calls) comes its end-of-sequence step, an empty delta carrying the finish."""
    chunks = stream_post(client, CHAT, _body(tool_choice, stream=True)).chunks
    role, *calls, eos = chunks
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert calls, "the arguments come before the end of sequence"
    for chunk in calls:
        [choice] = chunk["choices"]
        assert choice["finish_reason"] is None
        assert set(choice["delta"]) == {"content", "tool_calls"}, choice
        assert choice["delta"]["content"] is None and choice["delta"]["tool_calls"]
    [last] = eos["choices"]
    assert last["delta"] == {}
    assert (last["finish_reason"], last["stop_reason"]) == (finish, None)
