"""Latency, queueing, metrics, failure injection and control headers on /v1/responses and
/v1/messages: the serving machinery applies to both APIs exactly as it does to chat."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import MessageParam

from tests.support.errors import assert_anthropic_error, assert_openai_error
from tests.support.fixtures import server_fixture
from tests.support.metrics import (
    GENERATION_TOTAL,
    PROMPT_TOTAL,
    wait_until_idle,
)
from tests.support.named_sse import (
    A_WEATHER_TOOL,
    MESSAGES,
    RESPONSES,
    WEATHER_TOOL,
    of,
    parse_named_sse,
    stream_events,
)
from tests.support.server import SimServer

TTFT = 0.2
SLACK = 0.01  # timers may fire a little early
USER: list[MessageParam] = [{"role": "user", "content": "Hello there"}]
QUEUE_FULL = "Failed to enqueue request"

# One request body per API, and where its first generated token shows up in a stream.
BODIES = {
    RESPONSES: {"input": "Hello there", "max_output_tokens": 6},
    MESSAGES: {"messages": USER, "max_tokens": 6},
}
FIRST_DELTA = {RESPONSES: "response.output_text.delta", MESSAGES: "content_block_delta"}


def check_error(response: httpx.Response, path: str, status: int, **expect: Any) -> None:
    """The API's own error shape: OpenAI for Responses, Anthropic for Messages."""
    if path == MESSAGES:
        assert_anthropic_error(response, status, **expect)
    else:
        assert_openai_error(response, status, **expect)


def clients(sim: SimServer) -> tuple[openai.OpenAI, anthropic.Anthropic]:
    return (
        openai.OpenAI(base_url=sim.openai_url, api_key="none", max_retries=0),
        anthropic.Anthropic(base_url=sim.url, api_key="none", max_retries=0),
    )


# ------------------------------------------------------------------------ latency
slow = server_fixture(["--time-to-first-token", f"{int(TTFT * 1000)}ms", "--max-num-seqs", "8"])


@pytest.mark.timing
@pytest.mark.parametrize("path", [RESPONSES, MESSAGES], ids=["responses", "messages"])
def test_time_to_first_token_on_the_wire(slow: SimServer, path: str) -> None:
    with httpx.Client(base_url=slow.url, timeout=30) as client:
        events = stream_events(client, path, BODIES[path])
        start = time.monotonic()
        assert client.post(path, json=BODIES[path]).status_code == 200
        whole = time.monotonic() - start
    first = next(e for e in events if e.name == FIRST_DELTA[path])
    assert first.at >= TTFT - SLACK, first
    assert events[0].at >= TTFT - SLACK  # nothing is sent before the first token is ready
    assert whole >= TTFT - SLACK


@pytest.mark.timing
def test_time_to_first_token_through_the_sdks(slow: SimServer) -> None:
    oa, an = clients(slow)
    with oa, an:
        start = time.monotonic()
        first: float | None = None
        with oa.responses.stream(model=slow.model, input="Hello", max_output_tokens=5) as stream:
            for event in stream:
                if event.type == "response.output_text.delta" and first is None:
                    first = time.monotonic() - start
        assert first is not None and first >= TTFT - SLACK
        start = time.monotonic()
        with an.messages.stream(model=slow.model, max_tokens=5, messages=USER) as astream:
            next(iter(astream.text_stream))
            assert time.monotonic() - start >= TTFT - SLACK


# ------------------------------------------------------------------------ queueing
_SINGLE_ARGS = [
    "--max-num-seqs",
    "1",
    "--max-waiting-queue-length",
    "0",
    "--inter-token-latency",
    "60ms",
]
single = server_fixture(_SINGLE_ARGS)


LONG = {RESPONSES: {"max_output_tokens": 8}, MESSAGES: {"max_tokens": 8}}


@pytest.mark.parametrize("path", [RESPONSES, MESSAGES], ids=["responses", "messages"])
def test_queue_full_is_429_in_the_api_shape(single: SimServer, path: str) -> None:
    busy = {**BODIES[path], **LONG[path], "ignore_eos": True, "stream": True}
    oa, an = clients(single)
    with httpx.Client(base_url=single.url, timeout=30) as client, oa, an:
        with client.stream("POST", path, json=busy) as running:
            assert running.status_code == 200
            chunks = running.iter_bytes()
            first = next(chunks)  # the one slot is taken, and the request is still generating
            second = client.post(path, json=BODIES[path])
            check_error(second, path, 429, contains=QUEUE_FULL)
            streamed = client.post(path, json={**BODIES[path], "stream": True})
            check_error(streamed, path, 429, contains=QUEUE_FULL)
            if path == RESPONSES:
                with pytest.raises(openai.RateLimitError):
                    oa.responses.create(model=single.model, input="x", max_output_tokens=2)
            else:
                with pytest.raises(anthropic.RateLimitError):
                    an.messages.create(model=single.model, max_tokens=2, messages=USER)
            events = parse_named_sse(first + b"".join(chunks))
        # The refusals did not disturb the running request.
        assert events[-1].name == ("response.completed" if path == RESPONSES else "message_stop")
        assert len([e for e in events if e.name == FIRST_DELTA[path]]) == 8
        # The slot is free again.
        assert client.post(path, json=BODIES[path]).status_code == 200


# ------------------------------------------------------------------------ metrics
metered = server_fixture(["--max-num-seqs", "8", "--enable-request-id-headers"])


def test_metrics_count_both_apis(metered: SimServer) -> None:
    with httpx.Client(base_url=metered.url, timeout=30) as client:
        before = wait_until_idle(client)
        prompt = generation = 0
        reasons: dict[str, int] = {}

        def count(reason: str, usage: dict[str, Any]) -> None:
            nonlocal prompt, generation
            prompt += usage["input_tokens"]
            generation += usage["output_tokens"]
            reasons[reason] = reasons.get(reason, 0) + 1

        cut_r = {"input": "Hello", "max_output_tokens": 3, "ignore_eos": True}
        tool_r = {"input": "Weather?", "tools": [WEATHER_TOOL]}
        cut_m = {"messages": USER, "max_tokens": 3, "ignore_eos": True}
        tool_m = {
            "messages": USER,
            "max_tokens": 200,
            "tools": [A_WEATHER_TOOL],
            "tool_choice": {"type": "tool", "name": "get_weather"},
        }
        # vLLM's engine (and so the metric) ends a tool-calling turn as `stop`, as for chat.
        for body, reason in ((cut_r, "length"), (tool_r, "stop")):
            usage = client.post(RESPONSES, json=body).json()["usage"]
            count(reason, usage)
            last = stream_events(client, RESPONSES, body)[-1]
            count(reason, last.data["response"]["usage"])
        for body, reason in ((cut_m, "length"), (tool_m, "stop")):
            usage = client.post(MESSAGES, json=body).json()["usage"]
            count(reason, usage)
            events = stream_events(client, MESSAGES, body)
            start = of(events, "message_start")[0]["message"]["usage"]
            delta = of(events, "message_delta")[0]["usage"]
            count(reason, {**start, **delta})
        after = wait_until_idle(client)
    model = metered.model
    grown = {
        reason: after.success(model).get(reason, 0) - before.success(model).get(reason, 0)
        for reason in ("stop", "length", "tool_calls")
    }
    assert grown == {"tool_calls": 0, **reasons}, (grown, reasons)
    assert after.value(PROMPT_TOTAL) - before.value(PROMPT_TOTAL) == prompt
    assert after.value(GENERATION_TOTAL) - before.value(GENERATION_TOTAL) == generation


@pytest.mark.parametrize("path", [RESPONSES, MESSAGES], ids=["responses", "messages"])
def test_request_id_header(metered: SimServer, path: str) -> None:
    with httpx.Client(base_url=metered.url, timeout=30) as client:
        response = client.post(path, json=BODIES[path], headers={"X-Request-Id": "my-req-7"})
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "my-req-7"
        body = response.json()
        if path == RESPONSES:
            assert body["id"] == "resp_my-req-7"
            assert body["output"][0]["id"] == "msg_my-req-7"
        else:
            assert body["id"] == "msg_my-req-7"
        failed = client.post(
            path, json={**BODIES[path], "model": "nope"}, headers={"X-Request-Id": "my-req-8"}
        )
        check_error(failed, path, 404)
        assert failed.headers["x-request-id"] == "my-req-8"


# ------------------------------------------------------------------------ failures
failing = server_fixture(["--failure-injection-rate", "100", "--failure-types", "rate_limit"])


RATE_LIMITED = (
    "Rate limit reached for test-model in organization org-xxx on requests per min (RPM): "
    "Limit 3, Used 3, Requested 1."
)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("path", [RESPONSES, MESSAGES], ids=["responses", "messages"])
def test_injected_rate_limit_on_the_wire(failing: SimServer, path: str, stream: bool) -> None:
    with httpx.Client(base_url=failing.url, timeout=30) as client:
        response = client.post(path, json={**BODIES[path], "stream": stream})
    check_error(response, path, 429, message=RATE_LIMITED)


def test_injected_rate_limit_through_the_sdks(failing: SimServer) -> None:
    oa, an = clients(failing)
    with oa, an:
        with pytest.raises(openai.RateLimitError) as raised:
            oa.responses.create(model=failing.model, input="Hello")
        assert raised.value.status_code == 429
        assert isinstance(raised.value.body, dict)
        assert raised.value.body["message"] == RATE_LIMITED
        with pytest.raises(anthropic.RateLimitError) as caught:
            an.messages.create(model=failing.model, max_tokens=5, messages=USER)
        assert caught.value.status_code == 429
        assert caught.value.body == {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": RATE_LIMITED},
        }
        with (
            pytest.raises(anthropic.RateLimitError),
            an.messages.stream(model=failing.model, max_tokens=5, messages=USER) as astream,
        ):
            astream.get_final_message()


# ------------------------------------------------------------------------ X-Return-Error
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("path", [RESPONSES, MESSAGES], ids=["responses", "messages"])
def test_return_error_header(sim: SimServer, path: str, stream: bool) -> None:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        body = {**BODIES[path], "stream": stream}
        response = client.post(path, json=body, headers={"X-Return-Error": "503"})
        check_error(
            response,
            path,
            503,
            message="Simulated error triggered by X-Return-Error header (code 503)",
        )
        bad = client.post(path, json=body, headers={"X-Return-Error": "abc"})
        check_error(
            bad, path, 400, message='Invalid X-Return-Error header value "abc": must be an integer'
        )
        asked = client.post(path, json=body, headers={"X-Return-Error": "404"})
        check_error(asked, path, 404)


def test_return_error_through_the_sdks(sim: SimServer) -> None:
    oa, an = clients(sim)
    header = {"X-Return-Error": "503"}
    with oa, an:
        with pytest.raises(openai.InternalServerError) as raised:
            oa.responses.create(model=sim.model, input="Hello", extra_headers=header)
        assert raised.value.status_code == 503
        with pytest.raises(anthropic.InternalServerError) as caught:
            an.messages.create(model=sim.model, max_tokens=5, messages=USER, extra_headers=header)
        assert caught.value.status_code == 503
        with pytest.raises(anthropic.RateLimitError):
            an.messages.create(
                model=sim.model,
                max_tokens=5,
                messages=USER,
                extra_headers={"X-Return-Error": "429"},
            )
        with pytest.raises(openai.NotFoundError):
            oa.responses.create(model=sim.model, input="x", extra_headers={"X-Return-Error": "404"})


# ------------------------------------------------------------------------ cache threshold
CACHE_HEADER = {"X-Cache-Threshold-Finish-Reason": "true"}


def test_cache_threshold_header_on_messages(sim: SimServer) -> None:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        body = {"messages": USER, "max_tokens": 20}
        answer = client.post(MESSAGES, json=body, headers=CACHE_HEADER).json()
    assert answer["stop_reason"] == "max_tokens"
    assert answer["usage"]["output_tokens"] == 0
    assert [block.get("text", "") for block in answer["content"]] == [""]


def test_cache_threshold_header_does_not_touch_responses(sim: SimServer) -> None:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        body = {"input": "Hello", "max_output_tokens": 4, "ignore_eos": True}
        answer = client.post(RESPONSES, json=body, headers=CACHE_HEADER).json()
    assert answer["status"] == "incomplete" and answer["usage"]["output_tokens"] == 4
