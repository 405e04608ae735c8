"""How a forced tool call is reported, as vLLM reports it: a call to a named tool finishes
with "stop" (vLLM's parser did not choose it), and a forced call's message has empty, not
null, content; `auto` keeps null content and "tool_calls"."""

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


def test_a_streamed_call_to_a_named_tool_finishes_with_stop(client: httpx.Client) -> None:
    chunks = stream_post(client, CHAT, _body(NAMED, stream=True)).chunks
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"][0]["delta"]["tool_calls"], "it rides on the last argument"
