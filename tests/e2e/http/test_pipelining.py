"""Pipelining: requests sent back to back before any answer are answered one at a time,
in the order they came, each in full (a stream to its last chunk before the next answer
begins); a malformed request behind a good one is refused only after the good one is
answered."""

from __future__ import annotations

from tests.e2e.http.wire_client import (
    chat_request,
    exchange,
    parse,
    request,
)
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

# Streams long enough that an answer written out of turn would land inside them.
slow = server_fixture(["--time-to-first-token", "100ms", "--inter-token-latency", "10ms"])


def test_three_pipelined_requests_are_answered_in_order(sim: SimServer) -> None:
    data = exchange(
        sim,
        request("GET", "/health")
        + chat_request(max_tokens=5)
        + request("GET", "/v1/models", close=True),
    )
    health, chat, models = parse(data, ["GET", "POST", "GET"])
    assert (health.status, health.body) == (200, b"")
    assert chat.status == 200 and chat.json()["object"] == "chat.completion"
    assert models.status == 200 and models.json()["object"] == "list"
    assert models.closes and not health.closes and not chat.closes


def test_nothing_after_a_closing_request_is_answered(sim: SimServer) -> None:
    data = exchange(
        sim,
        request("GET", "/health", close=True)
        + request("GET", "/v1/models")
        + chat_request(max_tokens=2),
    )
    (health,) = parse(data, ["GET"])  # and no byte after it
    assert health.status == 200 and health.closes


def test_a_long_pipeline_is_answered_in_full_and_in_order(sim: SimServer) -> None:
    # Far more than the one request the server reads ahead: the rest waits in the socket
    # and must be read once the queue empties.
    paths = ["/health", "/v1/models", "/missing"] * 20
    batch = b"".join(request("GET", path) for path in paths) + request("GET", "/health", close=True)
    replies = parse(exchange(sim, batch), ["GET"] * (len(paths) + 1))
    expected = {"/health": 200, "/v1/models": 200, "/missing": 404}
    assert [r.status for r in replies] == [expected[p] for p in paths] + [200]
    for path, reply in zip(paths, replies, strict=False):
        if path == "/v1/models":
            assert reply.json()["object"] == "list"
        elif path == "/health":
            assert reply.body == b""


def test_a_pipelined_stream_is_answered_in_full_before_the_next_request(
    slow: SimServer,
) -> None:
    data = exchange(
        slow,
        chat_request(max_tokens=30, stream=True)
        + request("GET", "/health")
        + chat_request(max_tokens=3, close=True),
    )
    streamed, health, chat = parse(data, ["POST", "GET", "POST"])
    assert streamed.status == 200
    assert streamed.header("transfer-encoding") == b"chunked"
    assert streamed.body.startswith(b"data: ")
    assert streamed.body.endswith(b"data: [DONE]\n\n")
    assert health.status == 200 and health.body == b""
    assert chat.json()["object"] == "chat.completion"
    # On the wire: the stream's last chunk, then the next status line, nothing between.
    stream_end = data.index(b"\r\n\r\nHTTP/1.1 ") + 4
    assert data[:stream_end].endswith(b"\r\n0\r\n\r\n")
    assert data[stream_end:].startswith(b"HTTP/1.1 200 ")


def test_a_malformed_request_behind_a_stream_is_refused_after_it(slow: SimServer) -> None:
    data = exchange(slow, chat_request(max_tokens=20, stream=True) + b"BOGUS LINE\r\n\r\n")
    streamed, refused = parse(data, ["POST", "GET"])
    assert streamed.status == 200
    assert streamed.body.endswith(b"data: [DONE]\n\n")
    assert refused.status == 400 and refused.closes
    assert refused.json()["error"]["code"] == 400
