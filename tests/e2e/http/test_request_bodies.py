"""Request bodies on the wire: a chunked body sent in pieces with pauses is read whole;
`Expect: 100-continue` gets `100 Continue` before the body is sent; bodies over
--max-request-body-size-mb (declared or chunked) get a JSON 413 that closes the
connection, a declared one without the body ever being sent."""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.e2e.http.wire_client import (
    CHAT,
    assert_json_error,
    chat_body,
    connect,
    parse,
    parse_one,
    read_until,
    read_until_closed,
    readable,
    request,
)
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

MIB = 1024 * 1024
JSON = [("Content-Type", "application/json")]
CHUNKED = [*JSON, ("Transfer-Encoding", "chunked")]

one_mb = server_fixture(["--max-request-body-size-mb", "1"])


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def test_a_chunked_body_sent_in_pieces_is_read_whole(sim: SimServer) -> None:
    body = chat_body(max_tokens=4)
    pieces = [body[:1], body[1:20], body[20:45], body[45:]]
    with connect(sim) as sock:
        sock.sendall(request("POST", CHAT, CHUNKED))
        for piece in pieces:
            time.sleep(0.05)
            sock.sendall(_chunk(piece))
        time.sleep(0.05)
        sock.sendall(b"0\r\n\r\n")
        # The next request on the connection is read from where the chunked body ended.
        sock.sendall(request("GET", "/health", close=True))
        chat, health = parse(read_until_closed(sock), ["POST", "GET"])
    assert chat.status == 200, chat.body
    reply = chat.json()
    assert reply["object"] == "chat.completion"
    assert reply["usage"]["completion_tokens"] <= 4
    assert health.status == 200


def test_a_chunked_body_over_the_limit_is_a_413(one_mb: SimServer) -> None:
    piece = _chunk(b"x" * 64 * 1024)
    sent = 0
    with connect(one_mb) as sock:
        sock.sendall(request("POST", CHAT, CHUNKED))
        # Sends up to 2 MiB, stopping as soon as the server answers.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while sent < 2 * MIB and not readable(sock):
                sock.sendall(piece)
                sent += 64 * 1024
                time.sleep(0.005)
        data = read_until_closed(sock)
    assert sent > MIB  # the answer waited for the body to pass the limit
    error = assert_json_error(parse_one(data), 413)
    assert "max-request-body-size-mb" in error["message"]


def test_a_chunked_body_within_the_limit_is_served(one_mb: SimServer) -> None:
    # Just under 1 MiB of JSON, in 64 KiB chunks: the limit counts the body, not framing.
    body = chat_body(max_tokens=2, user="u" * (MIB - 300))
    assert len(body) < MIB
    with connect(one_mb) as sock:
        sock.sendall(request("POST", CHAT, CHUNKED, close=True))
        for start in range(0, len(body), 64 * 1024):
            sock.sendall(_chunk(body[start : start + 64 * 1024]))
        sock.sendall(b"0\r\n\r\n")
        reply = parse_one(read_until_closed(sock), "POST")
    assert reply.status == 200, reply.body[:300]


def test_expect_100_continue_is_answered_before_the_body(sim: SimServer) -> None:
    body = chat_body(max_tokens=3)
    head = request("POST", CHAT, [*JSON, ("Expect", "100-continue")], body, close=True)
    head = head[: -len(body)]
    with connect(sim) as sock:
        sock.sendall(head)
        interim = read_until(sock, b"\r\n\r\n", timeout=5.0)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        reply = parse_one(interim + read_until_closed(sock), "POST")
    assert reply.informational == (100,)
    assert reply.status == 200
    assert reply.json()["object"] == "chat.completion"


def test_expect_100_continue_refused_before_the_body_gets_no_continue(sim: SimServer) -> None:
    """A request refused on its head alone (here its Content-Type) is answered at once,
    without `100 Continue`, and the connection closes: its body is never read."""
    body = chat_body(max_tokens=3)
    headers = [("Content-Type", "text/plain"), ("Expect", "100-continue")]
    with connect(sim) as sock:
        sock.sendall(request("POST", CHAT, headers, body)[: -len(body)])
        data = read_until_closed(sock, timeout=5.0)
    assert b"100 Continue" not in data
    reply = parse_one(data, "POST")
    assert reply.status == 400 and reply.closes
    assert "application/json" in reply.json()["error"]["message"]


@pytest.mark.parametrize("expect", [True, False], ids=["expect-100", "no-expect"])
def test_a_declared_length_over_the_limit_is_refused_unsent(
    one_mb: SimServer, expect: bool
) -> None:
    headers = [*JSON, ("Content-Length", str(2 * MIB))]
    if expect:
        headers.append(("Expect", "100-continue"))
    with connect(one_mb) as sock:
        sock.sendall(request("POST", CHAT, headers))  # and not a byte of the body
        data = read_until_closed(sock, timeout=5.0)
    assert b"100 Continue" not in data
    error = assert_json_error(parse_one(data, "POST"), 413)
    assert "max-request-body-size-mb" in error["message"]
