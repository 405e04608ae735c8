"""Served names and aliases, /v1/models, health, metrics, 404/405, body limit, context length."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.errors import (
    assert_openai_error,
    context_length_message,
    max_tokens_message,
    prompt_too_long_message,
    unknown_model_message,
)
from tests.support.http import CHAT, COMPLETIONS, chat_body, parse_sse, post
from tests.support.server import SimServer

BASE = "org/base-model"
MAX_LEN = 10
MB = 1024 * 1024


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    args = [
        "--served-model-name",
        "alias-a",
        "alias-b",
        "--max-model-len",
        str(MAX_LEN),
        "--max-request-body-size-mb",
        "1",
    ]
    with SimServer(args, model=BASE) as sim:
        yield sim


@pytest.fixture(scope="module")
def client(server: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


# ------------------------------------------------------------------ model names


def test_models_lists_each_served_name(client: httpx.Client) -> None:
    before = int(time.time())
    response = client.get("/v1/models")
    after = int(time.time())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["object"] == "list"
    assert [entry["id"] for entry in body["data"]] == ["alias-a", "alias-b"]
    for entry in body["data"]:
        assert entry["object"] == "model"
        assert entry["owned_by"] == "vllm"
        assert entry["root"] == BASE
        assert entry["parent"] is None
        assert entry["max_model_len"] == MAX_LEN
        assert before <= entry["created"] <= after
        [permission] = entry["permission"]
        assert permission["object"] == "model_permission"
        assert re.fullmatch("modelperm-[0-9a-f]{16}", permission["id"]), permission


def test_models_ignores_query_and_body(client: httpx.Client) -> None:
    plain = client.get("/v1/models").json()["data"]
    with_query = client.get("/v1/models?limit=1&x=y").json()["data"]
    assert [m["id"] for m in with_query] == [m["id"] for m in plain]


@pytest.mark.parametrize("name", ["alias-a", "alias-b"])
def test_any_alias_answers_as_the_first(client: httpx.Client, name: str) -> None:
    reply = post(client, CHAT, chat_body("Hi", model=name, max_tokens=1)).json()
    assert reply["model"] == "alias-a"
    reply = post(client, COMPLETIONS, {"model": name, "prompt": "Hi", "max_tokens": 1}).json()
    assert reply["model"] == "alias-a"


def test_second_alias_streams_as_the_first(client: httpx.Client) -> None:
    body = chat_body("Hi", model="alias-b", max_tokens=2, stream=True)
    body["stream_options"] = {"include_usage": True}
    sse = parse_sse(post(client, CHAT, body).content)
    assert {chunk["model"] for chunk in sse.chunks} == {"alias-a"}


def test_missing_model_uses_the_first_alias(client: httpx.Client) -> None:
    assert post(client, CHAT, chat_body("Hi", max_tokens=1)).json()["model"] == "alias-a"


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_raw_model_is_unknown_when_aliases_exclude_it(client: httpx.Client, path: str) -> None:
    body = {**chat_body("Hi"), "prompt": "Hi", "model": BASE, "max_tokens": 1}
    message = unknown_model_message(BASE, "alias-a", "alias-b")
    assert_openai_error(post(client, path, body), 404, message, param="model")


# ------------------------------------------------------------ health and metrics


def test_health_is_200(client: httpx.Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.content == b""
    assert "content-type" not in response.headers  # vLLM answers a bare Response(200)


def test_ready_without_startup_duration(client: httpx.Client) -> None:
    assert client.get("/health/ready").status_code == 200


def test_metrics_show_idle_gauges_for_the_first_served_name(client: httpx.Client) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert 'vllm:num_requests_running{engine="0",model_name="alias-a"} 0.0' in lines
    assert 'vllm:num_requests_waiting{engine="0",model_name="alias-a"} 0.0' in lines


# ------------------------------------------------------------------- 404 / 405


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("POST", "/v1/nope"),
        ("POST", "/v1/chat/completion"),
        ("POST", "/chat/completions"),
        ("GET", "/v1"),
        ("POST", "/v1/detokenize"),
        ("GET", "/versions"),  # /version itself is vLLM's, answered
    ],
)
def test_unknown_route_is_404_json(client: httpx.Client, method: str, path: str) -> None:
    assert_openai_error(client.request(method, path), 404)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", CHAT, {"POST"}),
        ("PUT", CHAT, {"POST"}),
        ("DELETE", COMPLETIONS, {"POST"}),
        ("GET", COMPLETIONS, {"POST"}),
        ("POST", "/v1/models", {"GET"}),
        ("POST", "/metrics", {"GET"}),
        ("POST", "/health", {"GET"}),
        ("PATCH", "/health/ready", {"GET"}),
    ],
)
def test_wrong_method_is_405_with_allow(
    client: httpx.Client, method: str, path: str, allowed: set[str]
) -> None:
    # vLLM's Allow lists the route's own methods, without OPTIONS.
    response = client.request(method, path)
    assert_openai_error(response, 405)
    assert set(response.headers["allow"].split(", ")) == allowed


@pytest.mark.parametrize(("path", "allowed"), [(CHAT, {"POST"}), ("/v1/models", {"GET"})])
def test_options_lists_the_allowed_methods(
    client: httpx.Client, path: str, allowed: set[str]
) -> None:
    # Not a preflight (no Origin): routed, and answered with the route's methods as a 405's.
    response = client.options(path)
    assert response.status_code == 200
    assert set(response.headers["allow"].split(", ")) == allowed


def test_server_answers_after_route_errors(client: httpx.Client) -> None:
    client.get("/nope")
    client.get(CHAT)
    assert post(client, CHAT, chat_body("Hi", max_tokens=1)).status_code == 200


# ------------------------------------------------------------------ body limit


def _padded_chat(size: int) -> bytes:
    """A valid chat body of exactly `size` bytes (JSON whitespace padding)."""
    body = json.dumps(chat_body("Hi", max_tokens=1)).encode()
    assert len(body) < size
    return body[:-1] + b" " * (size - len(body)) + b"}"


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_body_of_exactly_the_limit_is_accepted(client: httpx.Client, path: str) -> None:
    if path == CHAT:
        body = _padded_chat(MB)
    else:
        raw = json.dumps({"prompt": "Hi", "max_tokens": 1}).encode()
        body = raw[:-1] + b" " * (MB - len(raw)) + b"}"
    assert len(body) == MB
    response = post(client, path, body)
    assert response.status_code == 200, response.text[:300]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_body_over_the_limit_is_413(client: httpx.Client, path: str) -> None:
    assert_openai_error(post(client, path, _padded_chat(MB + 1)), 413)


def test_chunked_body_over_the_limit_is_413(client: httpx.Client) -> None:
    body = _padded_chat(2 * MB)

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    response = client.post(CHAT, content=pieces(), headers={"content-type": "application/json"})
    assert_openai_error(response, 413)


def test_server_answers_after_oversized_bodies(client: httpx.Client) -> None:
    post(client, CHAT, _padded_chat(MB + 1))
    with httpx.Client(base_url=str(client.base_url), timeout=30) as fresh:
        assert post(fresh, CHAT, chat_body("Hi", max_tokens=1)).status_code == 200


# -------------------------------------------------------------- context length


def _refused(response: httpx.Response, max_tokens: int | None) -> None:
    """vLLM's context-length refusal, which names the prompt (`input_tokens`)."""
    message = context_length_message(MAX_LEN, max_tokens)
    assert_openai_error(response, 400, message, param="input_tokens")


@pytest.mark.parametrize("stream", [False, True])
def test_chat_context_length_is_a_plain_400(client: httpx.Client, stream: bool) -> None:
    """`### user: This is a test.\\n` is 10 tokens; 10 + 8 > 10, checked before queueing."""
    body = chat_body("This is a test.", max_tokens=8, stream=stream)
    _refused(post(client, CHAT, body), 8)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_context_uses_effective_max_tokens(client: httpx.Client, stream: bool) -> None:
    body = chat_body("This is a test.", max_tokens=1, max_completion_tokens=8, stream=stream)
    _refused(post(client, CHAT, body), 8)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_context_length_is_a_plain_400(client: httpx.Client, stream: bool) -> None:
    body = {"prompt": list(range(1, 11)), "max_tokens": 8, "stream": stream}
    _refused(post(client, COMPLETIONS, body), 8)


def test_completions_context_checked_per_prompt(client: httpx.Client) -> None:
    body = {"prompt": [[1, 2], list(range(1, 10))], "max_tokens": 2}
    _refused(post(client, COMPLETIONS, body), 2)
    assert post(client, COMPLETIONS, {**body, "max_tokens": 1}).status_code == 200


def test_a_prompt_filling_the_context_leaves_no_room_even_unasked(client: httpx.Client) -> None:
    """Without max_tokens a chat still needs room for one token."""
    reply = post(client, CHAT, chat_body("Hello there")).json()
    assert reply["usage"]["prompt_tokens"] < MAX_LEN  # room for one token at least
    _refused(post(client, CHAT, chat_body("This is a test.")), None)


@pytest.mark.parametrize(
    ("path", "max_tokens"),
    # Completions default to 16 tokens, over this context: only chat can leave it unset.
    [(COMPLETIONS, 1), (CHAT, 1), (CHAT, None)],
)
def test_a_prompt_alone_over_the_context_is_refused_as_such(
    client: httpx.Client, path: str, max_tokens: int | None
) -> None:
    """A prompt longer than the context is refused without a word on the output tokens."""
    words = " ".join(["word"] * MAX_LEN)
    body: dict[str, object] = {**chat_body(words), "prompt": list(range(1, MAX_LEN + 2))}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    response = post(client, path, body)
    assert_openai_error(response, 400, prompt_too_long_message(MAX_LEN), param="input_tokens")


def test_max_tokens_above_the_context_is_refused_as_such(client: httpx.Client) -> None:
    """A max_tokens that alone exceeds the context names max_tokens, whatever the prompt."""
    response = post(client, CHAT, chat_body("Hi", max_tokens=MAX_LEN + 1))
    message = max_tokens_message(MAX_LEN, MAX_LEN + 1)
    assert_openai_error(response, 400, message, param="max_tokens")


def test_prompt_plus_max_tokens_equal_to_the_limit_fits(client: httpx.Client) -> None:
    reply = post(client, CHAT, chat_body("Hello", max_tokens=4, ignore_eos=True)).json()
    assert reply["usage"]["prompt_tokens"] == 6
    assert reply["usage"]["completion_tokens"] == 4
    body = {"prompt": list(range(1, 8)), "max_tokens": 3, "ignore_eos": True}
    assert post(client, COMPLETIONS, body).json()["usage"]["total_tokens"] == MAX_LEN
