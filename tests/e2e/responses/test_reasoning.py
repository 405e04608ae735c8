"""--reasoning-parser on /v1/responses: a `reasoning` output item before the message, its
`response.reasoning_text.*` events streamed before the message's, and
`output_tokens_details.reasoning_tokens`, as vLLM 0.32 answers with a reasoning parser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.errors import assert_openai_error
from tests.support.http import json_ok
from tests.support.named_sse import RESPONSES, Event, stream_events
from tests.support.server import SimServer

RATIO = 0.5
RS_ID = r"rs_[0-9a-f]{16}"


@pytest.fixture(scope="module")
def qwen3() -> Iterator[SimServer]:
    with SimServer(["--reasoning-parser", "qwen3", "--reasoning-ratio", str(RATIO)]) as sim:
        yield sim


def _body(sim: SimServer, **extra: Any) -> dict[str, Any]:
    return {
        "model": sim.model,
        "input": "Hello",
        "max_output_tokens": 10,
        "ignore_eos": True,
        **extra,
    }


def _create(sim: SimServer, **extra: Any) -> dict[str, Any]:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return json_ok(client.post(RESPONSES, json=_body(sim, **extra)))


def _events(sim: SimServer, **extra: Any) -> list[Event]:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return stream_events(client, RESPONSES, _body(sim, **extra))


def test_the_reasoning_item_comes_before_the_message(qwen3: SimServer) -> None:
    response = _create(qwen3)
    reasoning, message = response["output"]
    assert reasoning == {
        "id": reasoning["id"],
        "summary": [],
        "type": "reasoning",
        "content": [{"text": reasoning["content"][0]["text"], "type": "reasoning_text"}],
        "encrypted_content": None,
        "status": None,  # vLLM's non-streamed item has no status
    }
    assert reasoning["id"].startswith("rs_") and reasoning["content"][0]["text"]
    assert message["type"] == "message" and message["content"][0]["text"]
    details = response["usage"]["output_tokens_details"]
    assert details["reasoning_tokens"] == int(10 * RATIO)
    assert response["usage"]["output_tokens"] == 10


def test_all_reasoning_gives_only_the_reasoning_item() -> None:
    with SimServer(["--reasoning-parser", "deepseek_r1", "--reasoning-ratio", "1"]) as sim:
        response = _create(sim, max_output_tokens=6)
    assert [item["type"] for item in response["output"]] == ["reasoning"]
    assert response["status"] == "incomplete"
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 6


def test_include_reasoning_false_keeps_the_item_out_but_counts_it(qwen3: SimServer) -> None:
    response = _create(qwen3, include_reasoning=False)
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == int(10 * RATIO)


def test_effort_none_turns_qwen3_thinking_off(qwen3: SimServer) -> None:
    response = _create(qwen3, reasoning={"effort": "none"})
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 0
    assert response["reasoning"] == {  # echoed as vLLM does, with every key
        "context": None,
        "effort": "none",
        "generate_summary": None,
        "mode": None,
        "summary": None,
    }


@pytest.mark.parametrize("effort", ["huge", 3, {"level": 1}])
def test_an_unknown_effort_is_refused(qwen3: SimServer, effort: object) -> None:
    with httpx.Client(base_url=qwen3.url, timeout=30) as client:
        response = client.post(RESPONSES, json=_body(qwen3, reasoning={"effort": effort}))
    assert_openai_error(response, 400, param="reasoning.effort")


def test_without_a_parser_there_is_no_reasoning_item(sim: SimServer) -> None:
    response = _create(sim)
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


def test_the_stream_opens_and_closes_the_reasoning_item_first(qwen3: SimServer) -> None:
    events = _events(qwen3)
    names = [event.name for event in events]
    half = int(10 * RATIO)
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.reasoning_text.delta"] * half,
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * (10 - half),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.data["sequence_number"] for event in events] == list(range(len(events)))
    added = events[2].data
    assert added["output_index"] == 0
    assert added["item"]["content"] is None and added["item"]["status"] == "in_progress"
    assert events[3].data["part"] == {"text": "", "type": "reasoning_text"}
    deltas = [e.data for e in events if e.name == "response.reasoning_text.delta"]
    assert all("logprobs" not in delta and delta["output_index"] == 0 for delta in deltas)
    reasoning_text = "".join(delta["delta"] for delta in deltas)
    done = next(e.data for e in events if e.name == "response.reasoning_text.done")
    assert done["text"] == reasoning_text
    text_deltas = [e.data for e in events if e.name == "response.output_text.delta"]
    assert all(delta["output_index"] == 1 for delta in text_deltas)
    final = events[-1].data["response"]
    reasoning, message = final["output"]
    assert reasoning["status"] == "completed"  # the streamed item's, as vLLM's
    assert reasoning["content"] == [{"text": reasoning_text, "type": "reasoning_text"}]
    assert message["content"][0]["text"] == "".join(delta["delta"] for delta in text_deltas)
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == half


def test_hidden_reasoning_streams_only_the_message(qwen3: SimServer) -> None:
    names = [event.name for event in _events(qwen3, include_reasoning=False)]
    assert not any(name.startswith("response.reasoning_text") for name in names)
    assert names.count("response.output_item.added") == 1


def test_all_reasoning_hidden_streams_no_item() -> None:
    args = ["--reasoning-parser", "qwen3", "--reasoning-ratio", "1"]
    with SimServer(args) as sim:
        events = _events(sim, include_reasoning=False, max_output_tokens=4)
    assert [e.name for e in events] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert events[-1].data["response"]["output"] == []


def test_the_sdk_stream_helper_assembles_the_reasoning(qwen3: SimServer) -> None:
    client = openai.OpenAI(base_url=f"{qwen3.url}/v1", api_key="none")
    with client.responses.stream(
        model=qwen3.model, input="Hello", max_output_tokens=10, extra_body={"ignore_eos": True}
    ) as stream:
        final = stream.get_final_response()
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and reasoning.content
    assert reasoning.content[0].text
    assert message.type == "message" and final.output_text
    assert final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == int(10 * RATIO)
    created = client.responses.create(model=qwen3.model, input="Hello", max_output_tokens=10)
    assert created.output[0].type == "reasoning"


def test_an_answer_handed_back_as_input_continues_the_conversation(qwen3: SimServer) -> None:
    """A client that appends the previous output (its reasoning item too) to the next input,
    as the SDK's examples do, gets an answer: the reasoning item stays out of the prompt."""
    first = _create(qwen3)
    follow_up = [{"role": "user", "content": "Hello"}, *first["output"]]
    follow_up.append({"role": "user", "content": "And then?"})
    second = _create(qwen3, input=follow_up)
    assert second["output"][0]["type"] == "reasoning"


def test_a_stored_answer_continues_without_its_reasoning() -> None:
    """previous_response_id rebuilds the conversation without the reasoning, as the same
    history handed back with its reasoning item does."""
    args = ["--reasoning-parser", "qwen3"]
    with SimServer(args, env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"}) as sim:
        first = _create(sim)
        stored = _create(sim, input="And then?", previous_response_id=first["id"])
        handed = [{"role": "user", "content": "Hello"}, *first["output"]]
        explicit = _create(sim, input=[*handed, {"role": "user", "content": "And then?"}])
    assert stored["usage"]["input_tokens"] == explicit["usage"]["input_tokens"]
