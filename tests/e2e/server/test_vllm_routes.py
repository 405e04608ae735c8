"""vLLM's serving routes beside the APIs: /version, SageMaker's /ping and /invocations,
/load, the dev-mode-only ones, and the pooling routes a generative model does not serve."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.support.errors import (
    assert_openai_error,
    assert_validation_error,
    unknown_model_message,
)
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import chat_body, json_ok, parse_sse, post
from tests.support.metrics import RUNNING, scrape
from tests.support.server import SimServer
from vllm_sim.protocols.vllm.server_info import VLLM_VERSION

KEY = "sekrit"
DEV_ONLY = ("/reset_prefix_cache", "/pause", "/resume", "/is_paused")
POOLING = ("/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank")

keyed = server_fixture(["--api-key", KEY])
keyed_http = http_fixture("keyed")
SLOW = ["--latency-calculator", "constant", "--time-to-first-token", "2s", "--max-num-seqs", "2"]
tracked = server_fixture(["--enable-server-load-tracking", *SLOW])
tracked_http = http_fixture("tracked")
slow = server_fixture(SLOW)
slow_http = http_fixture("slow")
sim_dev = server_fixture(env={"VLLM_SERVER_DEV_MODE": "1"})


def test_version_is_the_release_emulated(http: httpx.Client) -> None:
    assert VLLM_VERSION == "0.32.0"
    assert json_ok(http.get("/version")) == {"version": "0.32.0"}


def test_ping_answers_as_health_does(http: httpx.Client) -> None:
    health = http.get("/health")
    for method in ("GET", "POST"):
        ping = http.request(method, "/ping")
        assert ping.status_code == health.status_code == 200
        assert ping.content == health.content
        assert "content-type" not in ping.headers  # vLLM's bare Response(200), as /health
    assert http.put("/ping").status_code == 405


def test_probes_are_open_but_invocations_need_the_key(keyed_http: httpx.Client) -> None:
    for path in ("/ping", "/version", "/load", "/health"):
        assert keyed_http.get(path).status_code == 200, path
    assert keyed_http.post("/ping").status_code == 200
    anonymous = keyed_http.post("/invocations", json=chat_body(max_tokens=2))
    assert_openai_error(anonymous, 401)
    authorized = keyed_http.post(
        "/invocations", json=chat_body(max_tokens=2), headers={"Authorization": f"Bearer {KEY}"}
    )
    assert json_ok(authorized)["object"] == "chat.completion"


def test_invocations_dispatches_by_shape(http: httpx.Client) -> None:
    chat = json_ok(post(http, "/invocations", chat_body(max_tokens=3)))
    assert chat["object"] == "chat.completion" and chat["id"].startswith("chatcmpl-")
    text = json_ok(post(http, "/invocations", {"prompt": "Hello", "max_tokens": 3}))
    assert text["object"] == "text_completion" and text["id"].startswith("cmpl-")
    both = json_ok(post(http, "/invocations", {**chat_body(max_tokens=3), "prompt": "x"}))
    assert both["object"] == "chat.completion"  # chat is tried first, as in vLLM
    streamed = post(http, "/invocations", chat_body(max_tokens=3, stream=True))
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    chunks = parse_sse(streamed.content).chunks
    assert chunks and all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_invocations_errors_are_the_dispatched_endpoints(
    http: httpx.Client, sim: SimServer
) -> None:
    unknown = post(http, "/invocations", {"inputs": "Hello"})
    assert_openai_error(
        unknown,
        400,
        "Cannot find suitable handler for request. "
        "Expected one of: ['ChatCompletionRequest', 'CompletionRequest']",
        param=None,
    )
    assert_openai_error(post(http, "/invocations", {"messages": None}), 400)
    # Chat's own refusals, in vLLM 0.32's validation wording (the location is under `body`).
    assert_validation_error(post(http, "/invocations", b"{not json"), "body.1", "json_invalid")
    not_object = post(http, "/invocations", b"[1, 2]")
    assert_validation_error(not_object, "body", "model_attributes_type")
    wrong = post(http, "/invocations", {**chat_body(), "max_tokens": "many"})
    assert_validation_error(wrong, "body.max_tokens", "int_parsing")
    missing = post(http, "/invocations", {**chat_body(), "model": "nope"})
    assert_openai_error(missing, 404, unknown_model_message("nope", sim.model), param="model")
    assert http.get("/invocations").status_code == 405


JSON_HEADERS = {"content-type": "application/json"}


def _in_flight(client: httpx.Client, count: int, stream: bool) -> Iterator[threading.Thread]:
    """Starts `count` chat requests (each takes 2 s) on threads."""
    body = json.dumps(chat_body(max_tokens=2, stream=stream))

    def send() -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=30) as own:
            assert (
                own.post("/v1/chat/completions", content=body, headers=JSON_HEADERS).status_code
                == 200
            )

    for _ in range(count):
        thread = threading.Thread(target=send)
        thread.start()
        yield thread


def _load(client: httpx.Client) -> int:
    body = json_ok(client.get("/load"))
    assert set(body) == {"server_load"}
    value: int = body["server_load"]
    return value


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 1.8  # within the requests' 2 s
    while not check():
        assert time.monotonic() < deadline, "the requests never got in flight"
        time.sleep(0.02)


@pytest.mark.timing
def test_load_counts_requests_in_flight_when_tracking(tracked_http: httpx.Client) -> None:
    assert _load(tracked_http) == 0
    # Three requests on two slots: the waiting one counts too (vLLM counts HTTP requests).
    threads = [*_in_flight(tracked_http, 2, stream=True), *_in_flight(tracked_http, 1, False)]
    _until(lambda: _load(tracked_http) == 3)
    for thread in threads:
        thread.join()
    assert _load(tracked_http) == 0
    # Refused requests are counted while they are answered, and released.
    assert_validation_error(
        post(tracked_http, "/v1/chat/completions", {"messages": 1}), "body.messages", "list_type"
    )
    assert_openai_error(post(tracked_http, "/invocations", {"inputs": 1}), 400)
    assert _load(tracked_http) == 0


@pytest.mark.timing
def test_load_is_zero_without_tracking(slow_http: httpx.Client) -> None:
    threads = list(_in_flight(slow_http, 2, stream=False))
    _until(lambda: scrape(slow_http).value(RUNNING) == 2)
    assert _load(slow_http) == 0
    for thread in threads:
        thread.join()


def test_dev_routes_only_in_dev_mode(http: httpx.Client) -> None:
    for path in DEV_ONLY:
        method = "GET" if path == "/is_paused" else "POST"
        assert_openai_error(http.request(method, path), 404, "Not Found")


@pytest.mark.parametrize("path", POOLING)
def test_pooling_routes_are_not_served_for_a_generative_model(
    http: httpx.Client, path: str
) -> None:
    body = {"model": "test-model", "query": "q", "documents": ["a"], "input": "x"}
    assert_openai_error(http.post(path, json=body), 404, "Not Found")


def test_dev_mode_routes_exist(sim_dev: SimServer) -> None:
    with httpx.Client(base_url=sim_dev.url, timeout=30) as client:
        assert json_ok(client.get("/is_paused")) == {"is_paused": False}
        response = client.post("/reset_prefix_cache")
        assert response.status_code == 200 and response.content == b""
