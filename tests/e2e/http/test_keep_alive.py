"""Persistent connections and response heads: several requests on one connection are each
answered in full with a correct length; HTTP/1.0 without keep-alive and `Connection: close`
close the connection after the answer; every answer carries an RFC 7231 Date."""

from __future__ import annotations

import email.utils
import re
import time

from tests.e2e.http.wire_client import (
    CHAT,
    Client,
    chat_body,
    closed_by_peer,
    connect,
    exchange,
    parse_one,
    request,
)
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

# Idle connections stay a minute: a connection closed within seconds was closed on purpose.
patient = server_fixture(env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "60"})
JSON = [("Content-Type", "application/json")]
# IMF-fixdate, the one form RFC 7231 (section 7.1.1.1) lets a server send.
IMF_FIXDATE = re.compile(
    rb"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d "
    rb"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT"
)


def test_requests_on_one_connection_are_each_answered_in_full(sim: SimServer) -> None:
    with Client(sim) as client:
        for _ in range(2):
            health = client.send("GET", "/health")
            assert health.status == 200 and health.body == b""
            assert health.header("content-length") == b"0"

            chat = client.send("POST", CHAT, JSON, chat_body(max_tokens=5))
            assert chat.status == 200
            assert chat.header("content-length") == str(len(chat.body)).encode()
            assert chat.json()["object"] == "chat.completion"

            streamed = client.send("POST", CHAT, JSON, chat_body(max_tokens=5, stream=True))
            assert streamed.status == 200
            assert streamed.header("transfer-encoding") == b"chunked"
            assert streamed.body.endswith(b"data: [DONE]\n\n")

            models = client.send("GET", "/v1/models")
            assert models.status == 200
            assert models.header("content-length") == str(len(models.body)).encode()
            assert [m["id"] for m in models.json()["data"]] == ["test-model"]

            missing = client.send("GET", "/no/such/path")
            assert missing.status == 404
            assert missing.header("content-length") == str(len(missing.body)).encode()
            for reply in (health, chat, streamed, models, missing):
                assert not reply.closes


def test_http_1_0_without_keep_alive_is_closed_after_the_answer(patient: SimServer) -> None:
    with connect(patient) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.0\r\nHost: test\r\n\r\n")
        closed, data, _ = closed_by_peer(sock, timeout=10.0)
    assert closed
    reply = parse_one(data)
    assert reply.status == 200
    assert reply.json()["object"] == "list"


def test_a_stream_to_an_http_1_0_client_is_not_chunked(sim: SimServer) -> None:
    body = chat_body(max_tokens=5, stream=True)
    data = exchange(sim, request("POST", CHAT, JSON, body, version="1.0"))
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding" not in head.lower()
    assert payload.startswith(b"data: ")  # the events themselves, no chunk sizes
    assert payload.endswith(b"data: [DONE]\n\n")


def test_connection_close_is_honoured_after_the_answer(patient: SimServer) -> None:
    with connect(patient) as sock:
        sock.sendall(request("GET", "/health", close=True))
        closed, data, _ = closed_by_peer(sock, timeout=10.0)
    assert closed
    reply = parse_one(data)
    assert reply.status == 200 and reply.closes


def test_a_closing_request_ends_a_kept_alive_connection(patient: SimServer) -> None:
    with connect(patient) as sock:
        sock.sendall(request("GET", "/health"))
        sock.settimeout(3.0)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(request("POST", CHAT, JSON, chat_body(max_tokens=3), close=True))
        closed, data, _ = closed_by_peer(sock, timeout=10.0)
    assert closed
    reply = parse_one(data)
    assert reply.status == 200 and reply.closes
    assert reply.json()["object"] == "chat.completion"


def _assert_date(value: bytes | None) -> None:
    assert value is not None
    assert IMF_FIXDATE.fullmatch(value), value
    sent = email.utils.parsedate_to_datetime(value.decode()).timestamp()
    assert abs(sent - time.time()) < 5, value


def test_every_answer_carries_an_rfc_7231_date(sim: SimServer) -> None:
    with Client(sim) as client:
        replies = [
            client.send("GET", "/health"),
            client.send("GET", "/v1/models"),
            client.send("GET", "/no/such/path"),
            client.send("POST", CHAT, JSON, chat_body(max_tokens=2)),
            client.send("POST", CHAT, JSON, chat_body(max_tokens=2, stream=True)),
            client.send("POST", CHAT, [("Content-Type", "text/plain")], b"{}"),
        ]
    # A protocol error is answered by the HTTP layer itself: it is dated too.
    replies.append(parse_one(exchange(sim, b"NOT HTTP AT ALL\r\n\r\n")))
    assert [r.status for r in replies] == [200, 200, 404, 200, 200, 400, 400]
    for reply in replies:
        assert len(reply.values("date")) == 1, reply.headers
        _assert_date(reply.header("date"))
