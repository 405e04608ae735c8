"""Every answer under /v1/messages is in Anthropic's envelope, the HTTP kernel's own errors
(404 below it, 405, 413, 503 while draining) included; the other routes keep OpenAI's."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from tests.support.async_http import chat_body, exit_status, post, wait_for_gauges
from tests.support.errors import assert_anthropic_error, assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.server import started

MB = 1024 * 1024
MESSAGES = "/v1/messages"
BODY = {"model": "test-model", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}

sim_1mb = server_fixture(["--max-request-body-size-mb", "1"])
client = http_fixture("sim_1mb")


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_wrong_method_is_anthropic_405(client: httpx.Client, method: str) -> None:
    response = client.request(method, MESSAGES)
    assert_anthropic_error(response, 405, error_type="invalid_request_error")
    assert response.headers["allow"] == "POST"  # vLLM lists the route's methods, not OPTIONS


def test_body_over_the_limit_is_anthropic_413(client: httpx.Client) -> None:
    body = b'{"max_tokens": 1' + b" " * MB + b"}"
    response = client.post(MESSAGES, content=body, headers={"content-type": "application/json"})
    assert_anthropic_error(response, 413, error_type="request_too_large")


def test_unknown_path_below_messages_is_anthropic_404(client: httpx.Client) -> None:
    assert_anthropic_error(client.post(MESSAGES + "/batches", json=BODY), 404)


def test_other_routes_keep_the_openai_envelope(client: httpx.Client) -> None:
    assert_openai_error(client.get("/v1/chat/completions"), 405)
    assert_openai_error(client.post("/v1/chat/completions/nope", json={}), 404)


@pytest.mark.timing
def test_draining_answers_anthropic_503() -> None:
    server, process = started(["--max-num-seqs", "1", "--time-to-first-token", "1s"])

    async def body(http: httpx.AsyncClient) -> None:
        chat = server.openai_url + "/chat/completions"
        in_flight = asyncio.create_task(post(http, chat, chat_body(server)))
        await wait_for_gauges(http, server, running=1)
        process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.2)
        refused = await post(http, server.url + MESSAGES, BODY)
        assert_anthropic_error(refused, 503, "server is shutting down", error_type="api_error")
        openai_refused = await post(http, chat, chat_body(server))
        assert_openai_error(openai_refused, 503, "server is shutting down", param=None)
        assert (await in_flight).status == 200

    assert exit_status(server, body, timeout=10) == 0
