"""Pod headers and X-Request-Id on generation responses, successes and errors alike.

Unlike the reference, this project also puts them on the error answers of
/v1/chat/completions and /v1/completions (and nowhere else).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import httpx
import pytest

from tests.support.errors import VALIDATION_PREFIX, VALIDATION_TYPE, assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import REQUEST_ID_RE
from tests.support.metrics import (
    CHAT,
    COMPLETIONS,
    POD_HEADERS,
    RUNNING,
    chat,
    scrape,
    timed_stream,
)
from tests.support.server import SimServer

POD_ENV = {"POD_NAME": "pod-7", "POD_NAMESPACE": "ns-7"}
QUEUE_FULL = "Failed to enqueue request, waiting requests queue is full"


tagged = server_fixture(
    ["--enable-request-id-headers", "--max-num-seqs", "1", "--max-waiting-queue-length", "0"],
    env=POD_ENV,
)


client = http_fixture("tagged", scope="function")


def assert_tagged(response: httpx.Response | httpx.Headers, sim: SimServer, rid: str | None) -> str:
    """All three pod headers, and X-Request-Id (the given one, else a fresh UUID)."""
    headers = response.headers if isinstance(response, httpx.Response) else response
    assert headers.get("x-inference-pod") == "pod-7", headers
    assert headers.get("x-inference-port") == str(sim.port), headers
    assert headers.get("x-inference-namespace") == "ns-7", headers
    got = headers.get("x-request-id")
    assert got is not None, headers
    if rid is None:
        assert re.fullmatch(REQUEST_ID_RE, got), got
    else:
        assert got == rid
    return str(got)


def _body(path: str, stream: bool, **extra: Any) -> dict[str, Any]:
    if path == CHAT:
        return chat(max_tokens=2, stream=stream, **extra)
    return {"prompt": "Hello", "max_tokens": 2, "stream": stream, **extra}


PATHS = [CHAT, COMPLETIONS]
PREFIX = {CHAT: "chatcmpl-", COMPLETIONS: "cmpl-"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rid", ["given-id-1", None], ids=["given", "generated"])
def test_successes_carry_the_headers(
    tagged: SimServer, client: httpx.Client, path: str, stream: bool, rid: str | None
) -> None:
    headers = {"X-Request-Id": rid} if rid else {}
    if stream:
        result = timed_stream(client, path, _body(path, stream), headers)
        assert result.status == 200 and result.done
        got = assert_tagged(result.headers, tagged, rid)
        assert {e["id"] for _, e in result.events} == {PREFIX[path] + got}
    else:
        response = client.post(path, json=_body(path, stream), headers=headers)
        assert response.status_code == 200
        got = assert_tagged(response, tagged, rid)
        assert response.json()["id"] == PREFIX[path] + got


ERRORS: list[tuple[str, dict[str, Any], bytes | None, dict[str, str], int, str | None]] = [
    # (name, body, raw body, extra headers, status, param)
    ("x-return-error", {}, None, {"X-Return-Error": "503"}, 503, None),
    ("x-return-error-stream", {"stream": True}, None, {"X-Return-Error": "429"}, 429, None),
    ("bad-x-return-error", {}, None, {"X-Return-Error": "abc"}, 400, None),
    ("unknown-model", {"model": "nope"}, None, {}, 404, "model"),
    ("validation", {"max_tokens": 0}, None, {}, 400, "max_tokens"),
    ("malformed-json", {}, b"{not json", {"content-type": "application/json"}, 400, "body.1"),
]
ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError"}


@pytest.mark.parametrize(
    ("body", "raw", "extra", "status", "param"),
    [case[1:] for case in ERRORS],
    ids=[case[0] for case in ERRORS],
)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rid", ["err-id-9", None], ids=["given", "generated"])
def test_errors_carry_the_headers(
    tagged: SimServer,
    client: httpx.Client,
    path: str,
    rid: str | None,
    body: dict[str, Any],
    raw: bytes | None,
    extra: dict[str, str],
    status: int,
    param: str | None,
) -> None:
    headers = {**extra, **({"X-Request-Id": rid} if rid else {})}
    if raw is not None:
        response = client.post(path, content=raw, headers=headers)
    else:
        response = client.post(path, json=_body(path, False) | body, headers=headers)
    error_type = ERROR_TYPES.get(status, "InternalServerError")
    if raw is not None:  # refused by the body's schema, worded as vLLM words it
        error_type = VALIDATION_TYPE
    error = assert_openai_error(response, status, error_type=error_type, param=param)
    if raw is not None:
        assert error["message"].startswith(VALIDATION_PREFIX), error
    assert_tagged(response, tagged, rid)


def test_injected_failures_carry_the_headers(tagged: SimServer, client: httpx.Client) -> None:
    update = {"failure-injection-rate": 100, "failure-types": ["server_error"]}
    assert client.post("/admin/config", json=update).status_code == 200
    try:
        for path in PATHS:
            for stream in (False, True):
                response = client.post(
                    path, json=_body(path, stream), headers={"X-Request-Id": "inj-1"}
                )
                assert_openai_error(
                    response,
                    503,
                    "The server is overloaded or not ready yet.",
                    error_type="InternalServerError",
                    param=None,
                )
                assert_tagged(response, tagged, "inj-1")
    finally:
        assert client.post("/admin/config", json={"failure-injection-rate": 0}).status_code == 200


def test_queue_full_carries_the_headers(tagged: SimServer, client: httpx.Client) -> None:
    assert client.post("/admin/config", json={"time-to-first-token": "600ms"}).status_code == 200
    try:
        done: list[int] = []

        def occupy() -> None:
            with httpx.Client(base_url=tagged.url, timeout=30) as own:
                done.append(own.post(COMPLETIONS, json=_body(COMPLETIONS, False)).status_code)

        thread = threading.Thread(target=occupy)
        thread.start()
        deadline = time.monotonic() + 5
        while scrape(client).value(RUNNING) != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for path in PATHS:
            response = client.post(path, json=_body(path, True), headers={"X-Request-Id": "q-1"})
            assert_openai_error(response, 429, QUEUE_FULL, error_type="RateLimitError", param=None)
            assert_tagged(response, tagged, "q-1")
        thread.join(30)
        assert done == [200]
    finally:
        reset = {"time-to-first-token": "0s"}
        assert client.post("/admin/config", json=reset).status_code == 200


@pytest.mark.parametrize("path", ["/v1/models", "/health", "/health/ready", "/metrics"])
def test_no_headers_on_other_endpoints(client: httpx.Client, path: str) -> None:
    response = client.get(path, headers={"X-Request-Id": "other-1"})
    assert response.status_code == 200
    for name in (*POD_HEADERS, "x-request-id"):
        assert name not in response.headers, (path, name)


def test_no_headers_on_admin_endpoints(client: httpx.Client) -> None:
    responses = [
        client.get("/admin/config", headers={"X-Request-Id": "a"}),
        client.post("/admin/config", json={}, headers={"X-Request-Id": "a"}),
        client.post("/admin/config", json={"model": "x"}, headers={"X-Request-Id": "a"}),
        client.post("/fake_metrics", json={}, headers={"X-Request-Id": "a"}),
    ]
    assert [r.status_code for r in responses] == [200, 200, 400, 500]
    for response in responses:
        for name in (*POD_HEADERS, "x-request-id"):
            assert name not in response.headers, (response.request.url, name)


def test_pod_name_without_namespace_and_no_request_id_flag() -> None:
    env = {"POD_NAME": "only-pod", "POD_NAMESPACE": ""}
    with (
        SimServer(env=env) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as client,
    ):
        ok = client.post(CHAT, json=chat(max_tokens=1), headers={"X-Request-Id": "x"})
        failed = client.post(CHAT, json=chat(model="nope"), headers={"X-Request-Id": "x"})
        assert (ok.status_code, failed.status_code) == (200, 404)
        for response in (ok, failed):
            assert response.headers["x-inference-pod"] == "only-pod"
            assert response.headers["x-inference-port"] == str(sim.port)
            assert "x-inference-namespace" not in response.headers
            assert "x-request-id" not in response.headers
