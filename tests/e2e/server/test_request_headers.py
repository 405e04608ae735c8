"""Request ids (X-Request-Id, --enable-request-id-headers) and the llm-d pod headers."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import (
    CHAT,
    COMPLETIONS,
    REQUEST_ID_RE,
    chat_body,
    parse_sse,
    post,
)
from tests.support.server import SimServer

POD_ENV = {"POD_NAME": "pod-7", "POD_NAMESPACE": "ns-7"}
NO_POD_ENV = {"POD_NAME": "", "POD_NAMESPACE": ""}
POD_HEADERS = ("x-inference-pod", "x-inference-port", "x-inference-namespace")


tagged = server_fixture(["--enable-request-id-headers"], env=POD_ENV)


client = http_fixture("tagged")


def _request(path: str, stream: bool) -> dict[str, Any]:
    if path == CHAT:
        return chat_body("Hello", max_tokens=3, stream=stream)
    return {"prompt": "Hello", "max_tokens": 3, "stream": stream}


def _ids(response: httpx.Response, stream: bool) -> set[str]:
    if stream:
        return {chunk["id"] for chunk in parse_sse(response.content).chunks}
    return {response.json()["id"]}


PREFIX = {CHAT: "chatcmpl-", COMPLETIONS: "cmpl-"}
CASES = [(CHAT, False), (CHAT, True), (COMPLETIONS, False), (COMPLETIONS, True)]


@pytest.mark.parametrize(("path", "stream"), CASES)
def test_request_id_is_echoed_and_used(client: httpx.Client, path: str, stream: bool) -> None:
    response = post(client, path, _request(path, stream), headers={"X-Request-Id": "abc"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "abc"
    assert _ids(response, stream) == {PREFIX[path] + "abc"}


@pytest.mark.parametrize(("path", "stream"), CASES)
def test_request_id_generated_when_absent(client: httpx.Client, path: str, stream: bool) -> None:
    response = post(client, path, _request(path, stream))
    assert response.status_code == 200
    rid = response.headers["x-request-id"]
    assert re.fullmatch(REQUEST_ID_RE, rid), rid
    assert _ids(response, stream) == {PREFIX[path] + rid}


def test_empty_request_id_header_means_absent(client: httpx.Client) -> None:
    response = post(client, CHAT, _request(CHAT, False), headers={"X-Request-Id": ""})
    rid = response.headers["x-request-id"]
    assert re.fullmatch(REQUEST_ID_RE, rid), rid
    assert response.json()["id"] == f"chatcmpl-{rid}"


def test_request_id_with_n_is_shared(client: httpx.Client) -> None:
    body = {"prompt": ["a", "b"], "n": 2, "max_tokens": 2}
    response = post(client, COMPLETIONS, body, headers={"X-Request-Id": "multi-1"})
    assert response.json()["id"] == "cmpl-multi-1"
    assert response.headers["x-request-id"] == "multi-1"


@pytest.mark.parametrize(("path", "stream"), CASES)
def test_pod_headers_on_generation_responses(
    client: httpx.Client, tagged: SimServer, path: str, stream: bool
) -> None:
    response = post(client, path, _request(path, stream))
    assert response.status_code == 200
    assert response.headers["x-inference-pod"] == "pod-7"
    assert response.headers["x-inference-port"] == str(tagged.port)
    assert response.headers["x-inference-namespace"] == "ns-7"


@pytest.mark.parametrize("path", ["/v1/models", "/health", "/health/ready", "/metrics"])
def test_no_pod_headers_on_other_endpoints(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    for name in POD_HEADERS:
        assert name not in response.headers


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_pod_headers_on_errors_too(client: httpx.Client, path: str) -> None:
    """Unlike the reference, a router sees which pod refused a request as well."""
    response = post(client, path, {"model": "nope", "prompt": "x", "messages": []})
    assert_openai_error(response, 404)
    for name in POD_HEADERS:
        assert name in response.headers


def test_flag_off_the_header_still_names_the_request_but_is_not_echoed() -> None:
    """As in vLLM, X-Request-Id is the request id whatever the flag (P/D proxies send one
    id to both legs); only the flag echoes it back as a header. Without it, ids are 16 hex
    characters: half the hex of uuid5("<seed>-<port>-<n>")."""
    with (
        SimServer(env=NO_POD_ENV) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as http,
    ):
        given = post(http, CHAT, _request(CHAT, False), headers={"X-Request-Id": "bar-req-123"})
        first = post(http, CHAT, _request(CHAT, False))
        second = post(http, COMPLETIONS, _request(COMPLETIONS, True))
        third = post(http, COMPLETIONS, _request(COMPLETIONS, False))
        for response in (given, first, second, third):
            assert response.status_code == 200
            assert "x-request-id" not in response.headers
            for name in POD_HEADERS:
                assert name not in response.headers
        assert given.json()["id"] == "chatcmpl-bar-req-123"
        ids = [first.json()["id"], *_ids(second, True), third.json()["id"]]
        assert re.fullmatch("chatcmpl-[0-9a-f]{16}", ids[0])
        assert re.fullmatch("cmpl-[0-9a-f]{16}", ids[1])
        assert len(set(ids)) == 3
        expected = [uuid.uuid5(uuid.NAMESPACE_URL, f"42-{sim.port}-{i}").hex[:16] for i in range(3)]
        assert ids == [f"chatcmpl-{expected[0]}", f"cmpl-{expected[1]}", f"cmpl-{expected[2]}"]


@pytest.mark.parametrize(("path", "stream"), CASES)
def test_an_overlong_request_id_is_refused_not_copied(
    client: httpx.Client, path: str, stream: bool
) -> None:
    # A long id would otherwise be copied into every chunk of the stream. (One of 1 MB,
    # the probe's, no longer reaches the API: the request head is capped at 64 KiB, 431.)
    headers = {"X-Request-Id": "x" * 60_000}
    response = post(client, path, _request(path, stream), headers=headers)
    assert_openai_error(response, 400, "X-Request-Id is longer than 256 characters")
    assert len(response.content) < 1000
    assert re.fullmatch(REQUEST_ID_RE, response.headers["x-request-id"])
    fits = {"X-Request-Id": "y" * 256}
    assert post(client, path, _request(path, stream), headers=fits).status_code == 200
    huge = {"X-Request-Id": "x" * 1_000_000}
    assert post(client, path, _request(path, stream), headers=huge).status_code == 431
