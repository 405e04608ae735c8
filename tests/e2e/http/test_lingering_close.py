"""A lingering close after an early answer: a client that keeps sending a request the server
has refused before reading it all (a body over the limit: 413; a head over the limit: 431)
is not reset while it sends. The server ends its side after the answer, drops what still
arrives, and the client reads the answer whole; the connection then closes within the
lingering close's time bound even if the client never does."""

from __future__ import annotations

import contextlib
import socket
import time

from tests.e2e.http.wire_client import (
    CHAT,
    assert_json_error,
    connect,
    parse_one,
    read_until_closed,
    request,
)
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

MIB = 1024 * 1024
PIECE = b"x" * 64 * 1024
one_mb = server_fixture(["--max-request-body-size-mb", "1"])


def keep_sending(sock: socket.socket, size: int) -> None:
    """Sends `size` bytes in pieces, never looking for an answer: a reset fails the test."""
    for _ in range(size // len(PIECE)):
        sock.sendall(PIECE)


def test_a_client_that_keeps_sending_an_oversized_body_reads_the_413(one_mb: SimServer) -> None:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(4 * MIB))]
    with connect(one_mb) as sock:
        sock.sendall(request("POST", CHAT, headers))
        keep_sending(sock, 4 * MIB)  # the whole declared body, long after the answer
        data = read_until_closed(sock, timeout=5.0)
    error = assert_json_error(parse_one(data, "POST"), 413)
    assert "max-request-body-size-mb" in error["message"]


def test_a_client_that_keeps_sending_an_oversized_head_reads_the_431(sim: SimServer) -> None:
    with connect(sim) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n")
        for i in range(32):  # 2 MiB of header lines, the first 64 KiB over the limit
            sock.sendall(b"X-Filler-%d: %s\r\n" % (i, PIECE))
        data = read_until_closed(sock, timeout=5.0)
    assert_json_error(parse_one(data), 431)


def test_the_server_ends_its_side_at_once_and_closes_within_the_bound(sim: SimServer) -> None:
    with connect(sim) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nX-Big: ")
        # A line that never ends is measured from the read after the one that began the
        # head: sent apart, its bytes are all counted.
        time.sleep(0.1)
        sock.sendall(PIECE * 2)
        started = time.monotonic()
        data = read_until_closed(sock, timeout=5.0)  # the end of its side, not a close
        assert time.monotonic() - started < 1.0
        assert data.startswith(b"HTTP/1.1 431 ")
        sock.sendall(b"still talking")  # dropped: the connection still lingers
        # Once the lingering time (2 s, checked every 0.5 s) is up, the server closes: a
        # write then draws a reset.
        deadline = time.monotonic() + 5.0
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while time.monotonic() < deadline:
                sock.sendall(b"x")
                time.sleep(0.1)
            raise AssertionError("the server still held the connection after 5 s")
        assert time.monotonic() - started > 1.5
