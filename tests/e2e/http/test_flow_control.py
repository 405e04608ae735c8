"""Slow and vanishing readers: a client that asks for hundreds of MB of stream and never
reads costs the server a bounded amount of memory, while other clients are served; a
client that closes its connection mid-stream, whether it was reading or not, stops its
request at once (vllm:num_requests_running returns to 0)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.e2e.http.wire_client import (
    CHAT,
    chat_request,
    exchange,
    health_within,
    parse_one,
    pid_of,
    read_until,
    request,
    rss_mb,
    running,
    wait_running,
)
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

# Tokens as fast as the server makes them.
fast = server_fixture(["--inter-token-latency", "0"])
# 10 ms between tokens: a stream of 1000 tokens lasts 10 s.
paced = server_fixture(["--time-to-first-token", "100ms", "--inter-token-latency", "10ms"])


def _stream_request(max_tokens: int, n: int) -> bytes:
    body = {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "n": n,
        "ignore_eos": True,
        "stream": True,
    }
    return request("POST", CHAT, [("Content-Type", "application/json")], json.dumps(body).encode())


@contextlib.contextmanager
def non_reader(sim: SimServer, data: bytes) -> Iterator[socket.socket]:
    """A connection that sends `data` and never reads (its receive buffer kept small)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.settimeout(5)
        sock.connect((sim.host, sim.port))
        sock.sendall(data)
        yield sock
    finally:
        sock.close()


def test_a_client_that_never_reads_costs_bounded_memory(fast: SimServer) -> None:
    # Two streams of 25 x 20000 tokens: about 220 MB of events if they were all buffered.
    pid = pid_of(fast)
    before = rss_mb(pid)
    peak = before
    stalled = _stream_request(max_tokens=20000, n=25)
    with non_reader(fast, stalled), non_reader(fast, stalled):
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            time.sleep(0.25)
            peak = max(peak, rss_mb(pid))
            # Everyone else is still served meanwhile.
            assert health_within(fast, timeout=5.0).status == 200
        chat = exchange(fast, chat_request(max_tokens=5, close=True), timeout=5)
        assert parse_one(chat, "POST").json()["object"] == "chat.completion"
    assert peak - before < 64, f"RSS grew from {before:.0f} to {peak:.0f} MiB"


@pytest.mark.timing
def test_closing_a_stream_that_is_read_stops_its_request(paced: SimServer) -> None:
    with socket.create_connection((paced.host, paced.port), timeout=5) as sock:
        sock.sendall(_stream_request(max_tokens=1000, n=1))
        read_until(sock, b"data: ")  # the first chunk
        assert running(paced) == 1
    wait_running(paced, 0, timeout=1.5)


@pytest.mark.timing
def test_closing_a_stream_that_is_not_read_stops_its_request(paced: SimServer) -> None:
    # 200 choices per 10 ms step (about 4 MB/s): the socket buffers fill and the server's
    # writes pause within a second, long before the client closes.
    with non_reader(paced, _stream_request(max_tokens=1000, n=200)):
        time.sleep(2.0)
        assert running(paced) == 200  # one running sequence per choice
    wait_running(paced, 0, timeout=1.5)
