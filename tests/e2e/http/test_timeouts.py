"""The read timeouts (--request-read-timeout 1s, VLLM_HTTP_TIMEOUT_KEEP_ALIVE=1): a head
that takes too long, even one trickling in, and a body that stops arriving get a JSON 408
and the connection closes; a body that keeps arriving is not cut however long it takes; an
idle kept-alive connection and a fresh one that sends nothing are closed silently."""

from __future__ import annotations

import time

import pytest

from tests.e2e.http.wire_client import (
    CHAT,
    assert_json_error,
    chat_body,
    closed_by_peer,
    connect,
    health_within,
    parse_one,
    read_until,
    read_until_closed,
    request,
)
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

pytestmark = pytest.mark.timing

# The server checks its timeouts every 0.5 s: 1 s of silence is noticed within 1.5 s.
READ_TIMEOUT = 1.0
LATEST = 4.0  # generous, for a loaded machine

# Tokens 100 ms apart: a request of one token is answered at once, one of 30 takes 2.9 s.
timeouts = server_fixture(
    ["--request-read-timeout", "1s", "--inter-token-latency", "100ms"],
    env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "1"},
)
JSON = [("Content-Type", "application/json")]


def test_a_half_sent_head_is_a_408(timeouts: SimServer) -> None:
    with connect(timeouts) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nX-Slow: ")
        closed, answer, seconds = closed_by_peer(sock, timeout=LATEST + 2)
    assert closed
    assert READ_TIMEOUT * 0.9 <= seconds <= LATEST
    error = assert_json_error(parse_one(answer), 408)
    assert "head" in error["message"]
    assert health_within(timeouts, 5.0).status == 200


def test_a_head_that_trickles_in_is_timed_from_its_first_byte(timeouts: SimServer) -> None:
    """A slowloris keeps every gap short: the head's whole time is what is bounded."""
    with connect(timeouts) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        start = time.monotonic()
        answer = b""
        for i in range(40):  # 8 s of header lines, one every 0.2 s, unless cut
            time.sleep(0.2)
            try:
                sock.sendall(b"X-Drip-%d: x\r\n" % i)
            except (BrokenPipeError, ConnectionResetError):
                break
            sock.settimeout(0.001)
            try:
                answer += sock.recv(65536)
            except TimeoutError:
                continue
            if answer:
                break
        answer += read_until_closed(sock, timeout=LATEST)
    assert time.monotonic() - start <= LATEST
    assert_json_error(parse_one(answer), 408)


def test_a_body_that_stalls_is_a_408(timeouts: SimServer) -> None:
    body = chat_body(max_tokens=1)
    with connect(timeouts) as sock:
        sock.sendall(request("POST", CHAT, JSON, body)[: -len(body) // 2])
        closed, answer, seconds = closed_by_peer(sock, timeout=LATEST + 2)
    assert closed
    assert READ_TIMEOUT * 0.9 <= seconds <= LATEST
    error = assert_json_error(parse_one(answer, "POST"), 408)
    assert "body" in error["message"]


def test_a_chunked_body_that_stalls_is_a_408(timeouts: SimServer) -> None:
    headers = [*JSON, ("Transfer-Encoding", "chunked")]
    with connect(timeouts) as sock:
        sock.sendall(request("POST", CHAT, headers) + b'5\r\n{"mod\r\n')
        closed, answer, seconds = closed_by_peer(sock, timeout=LATEST + 2)
    assert closed and seconds <= LATEST
    assert_json_error(parse_one(answer, "POST"), 408)


def test_a_body_that_keeps_arriving_is_not_cut(timeouts: SimServer) -> None:
    """The body's limit is the longest gap between bytes, not its whole time."""
    body = chat_body(max_tokens=1, user="u" * 200)
    data = request("POST", CHAT, JSON, body, close=True)
    rest = data[len(data) - len(body) + 10 :]
    with connect(timeouts) as sock:
        sock.sendall(data[: -len(rest)])
        start = time.monotonic()
        # 8 bytes every 0.3 s for 2.5 s, far longer than the 1 s timeout in all.
        while time.monotonic() - start < 2.5 * READ_TIMEOUT:
            assert len(rest) > 8
            time.sleep(0.3)
            sock.sendall(rest[:8])
            rest = rest[8:]
        time.sleep(0.3)
        sock.sendall(rest)
        reply = parse_one(read_until_closed(sock), "POST")
    assert reply.status == 200, reply.body
    assert reply.json()["object"] == "chat.completion"


def test_an_idle_kept_alive_connection_is_closed_silently(timeouts: SimServer) -> None:
    with connect(timeouts) as sock:
        sock.sendall(request("GET", "/health"))
        first = read_until(sock, b"\r\n\r\n")
        assert first.startswith(b"HTTP/1.1 200 ")
        # Within the keep-alive timeout the connection still serves.
        time.sleep(0.3)
        sock.sendall(request("GET", "/health"))
        second = read_until(sock, b"\r\n\r\n")
        assert second.startswith(b"HTTP/1.1 200 ")
        closed, answer, seconds = closed_by_peer(sock, timeout=LATEST + 2)
    assert closed and answer == b""
    assert 0.9 <= seconds <= LATEST


def test_a_connection_that_sends_nothing_is_closed_silently(timeouts: SimServer) -> None:
    with connect(timeouts) as sock:
        closed, answer, seconds = closed_by_peer(sock, timeout=LATEST + 2)
    assert closed and answer == b""
    assert READ_TIMEOUT * 0.9 <= seconds <= LATEST


def test_a_request_being_answered_is_not_timed_out(timeouts: SimServer) -> None:
    """The read timeouts bound reading a request, never the time its answer takes: nothing
    is written for 2.9 s while the answer is generated, and the connection stays."""
    with connect(timeouts) as sock:
        sock.sendall(
            request("POST", CHAT, JSON, chat_body(max_tokens=30, ignore_eos=True), close=True)
        )
        start = time.monotonic()
        reply = parse_one(read_until_closed(sock, timeout=LATEST + 4), "POST")
    assert time.monotonic() - start > 2 * READ_TIMEOUT
    assert reply.status == 200, reply.body
    assert reply.json()["usage"]["completion_tokens"] == 30
