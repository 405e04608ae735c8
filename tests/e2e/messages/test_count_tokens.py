"""POST /v1/messages/count_tokens: vLLM's answer shape, the same count /v1/messages reports
for the same conversation, and Anthropic's error envelope."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from tests.support.errors import VALIDATION_PREFIX, assert_anthropic_error
from tests.support.fixtures import anthropic_fixture
from tests.support.named_sse import A_WEATHER_TOOL
from tests.support.server import SimServer

COUNT = "/v1/messages/count_tokens"


def validation_entry(loc: str) -> str:
    """The start of vLLM 0.32's refusal of a list field given something else."""
    return f"{VALIDATION_PREFIX}{{'type': 'list_type', 'loc': '{loc}', "


CONVERSATION: dict[str, Any] = {
    "system": [{"type": "text", "text": "You are terse."}],
    "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "P"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "Sunny, 25 C"},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ],
    "tools": [A_WEATHER_TOOL],
}

client = anthropic_fixture("sim")


def _count(http: httpx.Client, body: dict[str, Any]) -> int:
    response = http.post(COUNT, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    assert set(answer) == {"input_tokens", "context_management"}
    count: int = answer["input_tokens"]
    assert answer["context_management"] == {"original_input_tokens": count}
    return count


@pytest.mark.parametrize(
    "conversation",
    [
        {"messages": [{"role": "user", "content": "Hello there"}]},
        {"system": "Be brief.", "messages": [{"role": "user", "content": "Hello there"}]},
        CONVERSATION,
    ],
    ids=["one-message", "system", "tools-and-blocks"],
)
def test_counts_what_messages_counts(
    http: httpx.Client, sim: SimServer, conversation: dict[str, Any]
) -> None:
    body = {"model": sim.model, **conversation}
    counted = _count(http, body)
    created = http.post("/v1/messages", json={**body, "max_tokens": 1, "tool_choice": None})
    assert created.status_code == 200, created.text
    assert counted == created.json()["usage"]["input_tokens"] > 0


def test_longer_conversations_count_more(http: httpx.Client, sim: SimServer) -> None:
    short = _count(http, {"model": sim.model, "messages": [{"role": "user", "content": "Hi"}]})
    assert _count(http, {"model": sim.model, **CONVERSATION}) > short


def test_the_sdk_reads_the_count(client: anthropic.Anthropic, sim: SimServer) -> None:
    counted = client.messages.count_tokens(
        model=sim.model, messages=[{"role": "user", "content": "Hello there"}]
    )
    created = client.messages.create(
        model=sim.model, max_tokens=1, messages=[{"role": "user", "content": "Hello there"}]
    )
    assert counted.input_tokens == created.usage.input_tokens


@pytest.mark.parametrize(
    ("body", "status", "contains"),
    [
        ({"messages": [{"role": "user", "content": "Hi"}]}, 400, "model is required"),
        ({"model": "nope", "messages": [{"role": "user", "content": "Hi"}]}, 404, "`nope`"),
        ({"model": "test-model"}, 400, "messages is required"),
        ({"model": "test-model", "messages": []}, 400, "messages must not be empty"),
        ({"model": "test-model", "messages": [{"content": "Hi"}]}, 400, "role"),
        # A wrong type: vLLM 0.32's validation error, in Anthropic's envelope.
        ({"model": "test-model", "messages": "Hi"}, 400, validation_entry("body.messages")),
        (
            {"model": "test-model", "messages": [{"role": "user", "content": "Hi"}], "tools": 1},
            400,
            validation_entry("body.tools"),
        ),
        (
            {
                "model": "test-model",
                "messages": [{"role": "user", "content": "Hi"}],
                "tools": [{"name": "f"}],
            },
            400,
            "Tool validation failed",
        ),
    ],
)
def test_errors_are_anthropic_shaped(
    http: httpx.Client, body: dict[str, Any], status: int, contains: str
) -> None:
    assert_anthropic_error(http.post(COUNT, json=body), status, contains=contains)


def test_malformed_and_wrong_method(http: httpx.Client) -> None:
    assert_anthropic_error(http.post(COUNT, content=b"{nope"), 400)
    assert_anthropic_error(http.get(COUNT), 405)


def test_nesting_near_the_decoders_limit_is_never_a_500(http: httpx.Client) -> None:
    """Around Python's recursion limit either the decoder or the conversion of a tool call's
    arguments gives up first; each must be a 400 in Anthropic's envelope."""
    for depth in range(930, 1000):
        deep = '{"a":' * depth + "{}" + "}" * depth
        block = '{"type":"tool_use","id":"t","name":"f","input":' + deep + "}"
        body = '{"model":"test-model","messages":[{"role":"assistant","content":[' + block
        response = http.post(COUNT, content=(body + "]}]}").encode())
        if response.status_code != 200:
            assert_anthropic_error(response, 400)
