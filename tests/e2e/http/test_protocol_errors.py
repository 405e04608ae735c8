"""Requests the server cannot read: a malformed request line, header or framing is
answered 400 in the OpenAI error shape (JSON `{"error": {message, type, param, code}}`)
and the connection closes, while the server serves everyone else; a request asking to
switch protocols (websocket, h2c) is answered as plain HTTP/1.1 and the connection then
closes, since nothing after it can be read as HTTP/1.1."""

from __future__ import annotations

import pytest

from tests.e2e.http.wire_client import (
    CHAT,
    assert_json_error,
    chat_body,
    closed_by_peer,
    connect,
    exchange,
    health_within,
    parse,
    parse_one,
    request,
)
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

# Idle connections stay a minute: a connection closed within seconds was closed on purpose.
patient = server_fixture(env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "60"})

MALFORMED = {
    "garbage-line": b"HELLO THERE\r\n\r\n",
    "bad-method-byte": b"G\x01T /health HTTP/1.1\r\nHost: test\r\n\r\n",
    "bad-version": b"GET /health HTTP/9.9\r\nHost: test\r\n\r\n",
    "space-in-name": b"GET /health HTTP/1.1\r\nHost: test\r\nBad Header: y\r\n\r\n",
    "no-colon": b"GET /health HTTP/1.1\r\nHost: test\r\nNoColonHere\r\n\r\n",
    "nul-in-value": b"GET /health HTTP/1.1\r\nHost: test\r\nX-A: a\x00b\r\n\r\n",
    "bad-length": b"POST /v1/models HTTP/1.1\r\nHost: test\r\nContent-Length: 1x\r\n\r\n",
    "two-lengths": (
        b"POST /v1/models HTTP/1.1\r\nHost: test\r\n"
        b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"
    ),
    # Request smuggling: both framings at once.
    "length-and-chunked": (
        b"POST /v1/models HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
    "bad-chunk-size": (
        b"POST /v1/models HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"
    ),
    "tls-hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40),
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_a_json_400_that_closes(patient: SimServer, data: bytes) -> None:
    with connect(patient) as sock:
        sock.sendall(data)
        closed, answer, _ = closed_by_peer(sock, timeout=10.0)
    assert closed
    error = assert_json_error(parse_one(answer), 400)
    assert error["type"] == "BadRequestError"
    assert error["message"].startswith("Invalid HTTP request")
    assert health_within(patient, timeout=5.0).status == 200


def test_a_malformed_request_after_a_good_one_on_the_connection(patient: SimServer) -> None:
    with connect(patient) as sock:
        sock.sendall(request("GET", "/health"))
        sock.settimeout(3.0)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nBroken\r\n\r\n")
        closed, answer, _ = closed_by_peer(sock, timeout=10.0)
    assert closed
    assert_json_error(parse_one(answer), 400)


UPGRADES = {
    "websocket": [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ],
    "h2c": [
        ("Connection", "Upgrade, HTTP2-Settings"),
        ("Upgrade", "h2c"),
        ("HTTP2-Settings", "AAMAAABkAAQAAP__"),
    ],
}


@pytest.mark.parametrize("headers", UPGRADES.values(), ids=UPGRADES.keys())
def test_an_upgrade_is_answered_as_http_1_1_then_closed(
    patient: SimServer, headers: list[tuple[str, str]]
) -> None:
    with connect(patient) as sock:
        # What follows the head is in the asked-for protocol: never read as a request.
        sock.sendall(request("GET", "/health", headers) + b"\x81\x85abcdefghi")
        closed, answer, _ = closed_by_peer(sock, timeout=10.0)
    reply = parse_one(answer)
    assert reply.status == 200 and reply.body == b""
    assert closed, "left open"


def test_an_upgrade_behind_another_request_closes_after_it(patient: SimServer) -> None:
    with connect(patient) as sock:
        sock.sendall(
            request("GET", "/v1/models")
            + request("GET", "/health", UPGRADES["websocket"])
            + b"\x81\x85abcdefghi"
        )
        closed, answer, _ = closed_by_peer(sock, timeout=10.0)
    models, health = parse(answer, ["GET", "GET"])
    assert models.status == 200 and models.json()["object"] == "list"
    assert health.status == 200 and health.body == b""
    assert closed


@pytest.mark.parametrize("headers", UPGRADES.values(), ids=UPGRADES.keys())
def test_an_upgrade_is_never_switched_to(sim: SimServer, headers: list[tuple[str, str]]) -> None:
    answer = exchange(sim, request("GET", "/health", [*headers, ("Connection", "close")]))
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"101" not in answer.split(b"\r\n", 1)[0]
    assert parse_one(answer).body == b""


def test_an_upgrade_request_with_a_body_is_served_with_its_body(sim: SimServer) -> None:
    headers = [("Content-Type", "application/json"), *UPGRADES["h2c"]]
    answer = exchange(sim, request("POST", CHAT, headers, chat_body(max_tokens=2)))
    reply = parse_one(answer, "POST")
    assert reply.status == 200, reply.body
    assert reply.json()["object"] == "chat.completion"
