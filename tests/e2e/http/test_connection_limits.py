"""Descriptor exhaustion and slowloris: with RLIMIT_NOFILE at 256 (so at most 128 client
connections), more connections that each send half a request head than the process has
descriptors cannot lock anyone out: the ones waiting longest are shed, new clients are
served, and a request being answered is never the one shed. A header line that never ends
is cut at the head limit instead of being buffered, and what follows is read and dropped:
the server's memory stays bounded, and the client still reads the 431."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.http.wire_client import (
    CHAT,
    chat_request,
    connect,
    exchange,
    health_within,
    parse,
    parse_one,
    pid_of,
    read_until,
    read_until_closed,
    request,
    rss_mb,
)
from tests.support.server import SimServer

FD_LIMIT = 256
CAP = FD_LIMIT - 128  # the server keeps 128 descriptors for everything else
SLOWLORIS = 300  # more than the process could hold even without a cap
HALF_HEAD = b"GET /health HTTP/1.1\r\nHost: test\r\nX-Slow: "


@pytest.fixture(scope="module")
def few_fds() -> Iterator[SimServer]:
    # The default read timeout (30 s): no timeout rescues the server during these tests.
    with SimServer(["--inter-token-latency", "10ms"], fd_limit=FD_LIMIT) as server:
        yield server


@contextlib.contextmanager
def slowloris(
    sim: SimServer, count: int, opening: bytes = HALF_HEAD
) -> Iterator[list[socket.socket]]:
    """`count` connections that each send `opening` and then nothing."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection((sim.host, sim.port), timeout=5)
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                sock.sendall(opening)
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _closed(socks: list[socket.socket]) -> int:
    """How many of `socks` the server has closed (each readable: at its end, or reset)."""
    poller = select.poll()
    for sock in socks:
        poller.register(sock, select.POLLIN)
    return len(poller.poll(200))


def test_half_sent_heads_cannot_lock_new_clients_out(few_fds: SimServer) -> None:
    with slowloris(few_fds, SLOWLORIS) as socks:
        assert health_within(few_fds, timeout=5.0).status == 200
        for _ in range(5):  # and everyone after it
            data = exchange(few_fds, chat_request(max_tokens=3, close=True), timeout=5)
            assert parse_one(data, "POST").status == 200
            assert health_within(few_fds, timeout=5.0).status == 200
        shed = _closed(socks)
    # Every connection past the cap took the place of one of the oldest.
    assert shed >= SLOWLORIS - CAP
    assert len(socks) - shed <= CAP
    assert len(os.listdir(f"/proc/{pid_of(few_fds)}/fd")) < FD_LIMIT


def test_a_request_being_answered_is_never_shed(few_fds: SimServer) -> None:
    with connect(few_fds) as stream:
        stream.sendall(chat_request(max_tokens=150, stream=True, close=True))
        first = read_until(stream, b"data: ")  # the stream is under way (1.5 s in all)
        with slowloris(few_fds, SLOWLORIS):
            assert health_within(few_fds, timeout=5.0).status == 200
            rest = read_until_closed(stream)
    (reply,) = parse(first + rest, ["POST"])
    assert reply.status == 200
    assert reply.body.endswith(b"data: [DONE]\n\n")


def test_half_sent_bodies_cannot_lock_new_clients_out(few_fds: SimServer) -> None:
    opening = request(
        "POST", CHAT, [("Content-Type", "application/json")], b'{"model": "test-model"}'
    )[:-10]
    with slowloris(few_fds, CAP + 20, opening):
        time.sleep(0.2)
        assert health_within(few_fds, timeout=5.0).status == 200


def test_an_endless_header_line_is_cut_and_memory_stays_bounded(sim: SimServer) -> None:
    pid = pid_of(sim)
    before = rss_mb(pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb(pid))
            time.sleep(0.02)

    def flood() -> tuple[int, bytes]:
        """Sends 20 MB of one header value in 64 KiB pieces, no CRLF; (sent, answer)."""
        piece = b"a" * 64 * 1024
        sent = 0
        with connect(sim) as sock:
            try:
                sock.sendall(HALF_HEAD)
                while sent < 20 * 1000 * 1000:
                    sock.sendall(piece)
                    sent += len(piece)
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer = read_until_closed(sock, timeout=5)
        return sent, answer

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: flood(), range(4)))
    finally:
        done.set()
        sampler.join()
    for sent, answer in results:
        # Past the 64 KiB limit the rest is dropped as it comes (below the lingering close's
        # byte bound), so the client sends it all and then reads its answer.
        assert sent >= 20 * 1000 * 1000
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    # Buffered whole, the four values grow the server by over 100 MiB; cut, by nothing.
    assert peak - before < 50, f"RSS grew from {before:.0f} to {peak:.0f} MiB"
    assert health_within(sim, timeout=5.0).status == 200
