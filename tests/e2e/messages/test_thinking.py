"""--reasoning-parser on /v1/messages: a `thinking` block (with a signature) before the text,
streamed as thinking_delta events closed by one signature_delta, as vLLM 0.32's Anthropic
endpoint answers; `thinking` requests shape it as vLLM maps them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.http import json_ok
from tests.support.named_sse import MESSAGES, Event, stream_events
from tests.support.server import SimServer

RATIO = 0.5
SIGNATURE = re.compile(r"[0-9a-f]{32}")  # a uuid4 in hex, as vLLM signs
USER = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def qwen3() -> Iterator[SimServer]:
    with SimServer(["--reasoning-parser", "qwen3", "--reasoning-ratio", str(RATIO)]) as sim:
        yield sim


def _body(sim: SimServer, **extra: Any) -> dict[str, Any]:
    return {"model": sim.model, "messages": USER, "max_tokens": 10, "ignore_eos": True, **extra}


def _post(sim: SimServer, **extra: Any) -> httpx.Response:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return client.post(MESSAGES, json=_body(sim, **extra))


def _create(sim: SimServer, **extra: Any) -> dict[str, Any]:
    return json_ok(_post(sim, **extra))


def _events(sim: SimServer, **extra: Any) -> list[Event]:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return stream_events(client, MESSAGES, _body(sim, **extra))


def test_the_thinking_block_comes_before_the_text(qwen3: SimServer) -> None:
    message = _create(qwen3)
    thinking, text = message["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"]
    assert SIGNATURE.fullmatch(thinking["signature"])
    assert text["type"] == "text" and text["text"]
    assert message["usage"]["output_tokens"] == 10  # the thinking counts, with no breakdown
    assert set(message["usage"]) == {
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    }
    assert _create(qwen3)["content"][0]["signature"] != thinking["signature"]


def test_all_thinking_gives_only_the_thinking_block() -> None:
    with SimServer(["--reasoning-parser", "deepseek_r1", "--reasoning-ratio", "1"]) as sim:
        message = _create(sim, max_tokens=6)
    assert [block["type"] for block in message["content"]] == ["thinking"]
    assert message["stop_reason"] == "max_tokens"


@pytest.mark.parametrize(
    "extra",
    [{"thinking": {"type": "disabled"}}, {"chat_template_kwargs": {"enable_thinking": False}}],
)
def test_thinking_turned_off_on_qwen3(qwen3: SimServer, extra: dict[str, Any]) -> None:
    assert [block["type"] for block in _create(qwen3, **extra)["content"]] == ["text"]


def test_adaptive_changes_nothing(qwen3: SimServer) -> None:
    content = _create(qwen3, thinking={"type": "adaptive"})["content"]
    assert [block["type"] for block in content] == ["thinking", "text"]


def test_a_budget_caps_the_thinking(qwen3: SimServer) -> None:
    """budget_tokens ends the thinking early, as vLLM's thinking_token_budget does: 2,000
    tokens at a ratio of 0.5 would think for 1,000, the budget of 1,024 leaves it there, and
    a larger answer stops at the budget."""
    long = _create(qwen3, max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 1024})
    thinking = long["content"][0]["thinking"]
    with httpx.Client(base_url=qwen3.url, timeout=30) as client:
        counted = client.post("/tokenize", json={"model": qwen3.model, "prompt": thinking})
    assert counted.json()["count"] == 1024


@pytest.mark.parametrize(
    ("thinking", "message"),
    [
        ({"type": "enabled", "budget_tokens": 100}, "greater than or equal to 1024"),
        ({"type": "enabled", "budget_tokens": 2000}, "must be less than max_tokens"),
        ({"type": "enabled"}, "must be an integer"),
        ({"type": "sometimes"}, "thinking.type must be one of"),
        ("on", "thinking.type must be one of"),
    ],
)
def test_bad_thinking_is_refused(qwen3: SimServer, thinking: object, message: str) -> None:
    response = _post(qwen3, max_tokens=1500, thinking=thinking)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert message in error["error"]["message"]


def test_a_budget_without_a_parser_is_refused_as_vllm_does(sim: SimServer) -> None:
    response = _post(sim, max_tokens=1500, thinking={"type": "enabled", "budget_tokens": 1024})
    assert response.status_code == 400
    assert "reasoning_config is not configured" in response.json()["error"]["message"]


def test_the_stream_signs_the_thinking_block_before_closing_it(qwen3: SimServer) -> None:
    events = _events(qwen3)
    half = int(10 * RATIO)
    assert [event.name for event in events] == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * (half + 1),
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * (10 - half),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[1].data["content_block"] == {"type": "thinking", "thinking": ""}
    deltas = [e.data for e in events if e.name == "content_block_delta"]
    thinking = [d["delta"] for d in deltas[:half]]
    assert all(d["type"] == "thinking_delta" for d in thinking)
    signature = deltas[half]
    assert signature["index"] == 0 and signature["delta"]["type"] == "signature_delta"
    assert SIGNATURE.fullmatch(signature["delta"]["signature"])
    start_text = events[half + 5].data
    assert start_text["index"] == 1 and start_text["content_block"] == {"type": "text", "text": ""}
    assert all(d["index"] == 1 and d["delta"]["type"] == "text_delta" for d in deltas[half + 1 :])


def test_all_thinking_streams_one_signed_block() -> None:
    with SimServer(["--reasoning-parser", "qwen3", "--reasoning-ratio", "1"]) as sim:
        events = _events(sim, max_tokens=4)
    blocks = [e.data["content_block"]["type"] for e in events if e.name == "content_block_start"]
    assert blocks == ["thinking"]
    last_delta = [e.data for e in events if e.name == "content_block_delta"][-1]
    assert last_delta["delta"]["type"] == "signature_delta"


def test_the_sdk_stream_helper_assembles_the_thinking(qwen3: SimServer) -> None:
    client = anthropic.Anthropic(base_url=qwen3.url, api_key="none")
    with client.messages.stream(
        model=qwen3.model,
        max_tokens=10,
        messages=[{"role": "user", "content": "Hello"}],
        extra_body={"ignore_eos": True},
    ) as stream:
        final = stream.get_final_message()
    thinking, text = final.content
    assert thinking.type == "thinking" and thinking.thinking
    assert SIGNATURE.fullmatch(thinking.signature)
    assert text.type == "text" and text.text
    assert final.usage.output_tokens == 10
    created = client.messages.create(
        model=qwen3.model, max_tokens=10, messages=[{"role": "user", "content": "Hello"}]
    )
    assert created.content[0].type == "thinking"


def test_a_thinking_block_handed_back_continues_the_conversation(qwen3: SimServer) -> None:
    """Anthropic clients send the previous turn's thinking block back in the history."""
    first = _create(qwen3)
    history = [*USER, {"role": "assistant", "content": first["content"]}]
    second = _create(qwen3, messages=[*history, {"role": "user", "content": "And then?"}])
    assert second["content"][0]["type"] == "thinking"
