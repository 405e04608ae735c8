"""The Responses API's store (VLLM_ENABLE_RESPONSES_API_STORE=1, off by default as in vLLM):
GET /v1/responses/{id}, POST /v1/responses/{id}/cancel and previous_response_id."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, openai_fixture, server_fixture
from tests.support.http import EOS_TOKENS
from tests.support.named_sse import RESPONSES, WEATHER_TOOL, of, one, stream_events
from tests.support.server import SimServer

stored = server_fixture(env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"})
store_http = http_fixture("stored")
store_sdk = openai_fixture("stored")


def _create(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post(RESPONSES, json={"max_output_tokens": 6, **body})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def assert_not_found(response: httpx.Response, response_id: str) -> None:
    assert response.json() == {
        "error": {
            "message": f"Response with id '{response_id}' not found.",
            "type": "invalid_request_error",
            "param": "response_id",
            "code": 404,
        }
    }
    assert_openai_error(response, 404, error_type="invalid_request_error")


# ------------------------------------------------------------------ store off (the default)
def test_without_the_store_nothing_is_kept(http: httpx.Client) -> None:
    assert_not_found(http.get(f"{RESPONSES}/resp_nonexistent"), "resp_nonexistent")
    answer = _create(http, input="hi", store=True)  # `store` is ignored, as in vLLM
    rid = answer["id"]
    assert_not_found(http.get(f"{RESPONSES}/{rid}"), rid)
    assert_not_found(http.post(f"{RESPONSES}/{rid}/cancel"), rid)
    follow = http.post(RESPONSES, json={"input": "more", "previous_response_id": rid})
    assert_not_found(follow, rid)
    streamed = http.post(
        RESPONSES, json={"input": "more", "previous_response_id": rid, "stream": True}
    )
    assert_not_found(streamed, rid)  # refused before the stream starts


def test_routes_and_methods(http: httpx.Client) -> None:
    assert http.post(f"{RESPONSES}/resp_1").status_code == 405
    assert http.get(f"{RESPONSES}/resp_1/cancel").status_code == 405
    for path in (f"{RESPONSES}/", f"{RESPONSES}/a/b", f"{RESPONSES}/a/cancel/x"):
        assert_openai_error(http.get(path), 404, "Not Found")


# ------------------------------------------------------------------ store on
def test_a_stored_response_is_retrieved_as_answered(store_http: httpx.Client) -> None:
    answer = _create(store_http, input="hello there", metadata={"k": "v"})
    response = store_http.get(f"{RESPONSES}/{answer['id']}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == answer


def test_the_sdk_retrieves_and_cannot_cancel(store_sdk: openai.OpenAI, stored: SimServer) -> None:
    created = store_sdk.responses.create(model=stored.model, input="hi", max_output_tokens=4)
    again = store_sdk.responses.retrieve(created.id)
    assert again.id == created.id and again.output_text == created.output_text
    with pytest.raises(openai.BadRequestError) as caught:
        store_sdk.responses.cancel(created.id)
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["message"] == "Cannot cancel a synchronous response."
    assert body["param"] == "response_id"
    with pytest.raises(openai.NotFoundError):
        store_sdk.responses.retrieve("resp_missing")


def test_a_streamed_response_is_stored_when_it_ends(store_http: httpx.Client) -> None:
    events = stream_events(store_http, RESPONSES, {"input": "hi", "max_output_tokens": 4})
    final = one(events, "response.completed")["response"]
    assert store_http.get(f"{RESPONSES}/{final['id']}").json() == final


def test_store_false_is_honoured(store_http: httpx.Client) -> None:
    answer = _create(store_http, input="hi", store=False)
    assert_not_found(store_http.get(f"{RESPONSES}/{answer['id']}"), answer["id"])


def _input_tokens(client: httpx.Client, **body: Any) -> int:
    tokens: int = _create(client, **body)["usage"]["input_tokens"]
    return tokens


def test_previous_response_id_continues_the_conversation(store_http: httpx.Client) -> None:
    first = _create(store_http, input="What is the weather in Paris?", instructions="Be brief.")
    text = first["output"][0]["content"][0]["text"]
    second = _create(store_http, input="And in Rome?", previous_response_id=first["id"])
    assert second["previous_response_id"] == first["id"]
    alone = _input_tokens(store_http, input="And in Rome?", store=False)
    spelled_out = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "And in Rome?"},
    ]
    assert second["usage"]["input_tokens"] > alone
    assert second["usage"]["input_tokens"] == _input_tokens(
        store_http, input=spelled_out, store=False
    )
    # A chain keeps growing: the third turn sees both earlier ones.
    third = _create(store_http, input="Thanks.", previous_response_id=second["id"])
    reply = second["output"][0]["content"][0]["text"]
    chained = [
        *spelled_out,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Thanks."},
    ]
    assert third["usage"]["input_tokens"] == _input_tokens(store_http, input=chained, store=False)


def test_a_tool_call_continues_with_its_output(store_http: httpx.Client) -> None:
    first = _create(store_http, input="Weather in Paris?", tools=[WEATHER_TOOL])
    [call] = first["output"]
    assert call["type"] == "function_call"
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "21 C"}
    second = _create(
        store_http, input=[output], tools=[WEATHER_TOOL], previous_response_id=first["id"]
    )
    assert second["output"][0]["type"] == "message"  # the tool has answered: a text turn
    spelled_out = [
        {"role": "user", "content": "Weather in Paris?"},
        {key: call[key] for key in ("type", "call_id", "name", "arguments")},
        output,
    ]
    expected = _input_tokens(store_http, input=spelled_out, tools=[WEATHER_TOOL], store=False)
    assert second["usage"]["input_tokens"] == expected


def test_unknown_previous_response_and_background(store_http: httpx.Client) -> None:
    missing = store_http.post(RESPONSES, json={"input": "hi", "previous_response_id": "resp_x"})
    assert_not_found(missing, "resp_x")
    background = store_http.post(RESPONSES, json={"input": "hi", "background": True})
    assert_openai_error(background, 400, param="background", contains="not simulated")


def test_streamed_follow_up(store_http: httpx.Client) -> None:
    first = _create(store_http, input="hi")
    body = {"input": "more", "previous_response_id": first["id"], "max_output_tokens": 3}
    events = stream_events(store_http, RESPONSES, body)
    final = one(events, "response.completed")["response"]
    assert final["previous_response_id"] == first["id"]
    # A finished answer also counts its end of sequence, which streams no delta.
    eos = EOS_TOKENS if final["status"] == "completed" else 0
    assert len(of(events, "response.output_text.delta")) + eos == final["usage"]["output_tokens"]
    alone = _input_tokens(store_http, input="more", store=False)
    assert final["usage"]["input_tokens"] > alone
