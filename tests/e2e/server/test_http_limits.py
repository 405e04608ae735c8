"""Limits on a request's head: too many header lines or bytes get a 431 in the JSON error
shape and the connection is closed; the server keeps serving everyone else."""

from __future__ import annotations

import contextlib
import json
import socket

import pytest

from tests.support.server import SimServer
from vllm_sim.http.limits import ConnectionLimits

LIMITS = ConnectionLimits()


def _exchange(sim: SimServer, head: bytes) -> bytes:
    with socket.create_connection((sim.host, sim.port), timeout=10) as sock:
        answer = b""
        # Refused before all of it was read, the connection may be reset under us.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head)
            while chunk := sock.recv(65536):
                answer += chunk
        return answer


def _head(*headers: bytes) -> bytes:
    return b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"".join(headers) + b"\r\n"


@pytest.mark.parametrize(
    "headers",
    [
        [b"X-Many: 1\r\n"] * (LIMITS.max_headers + 1),
        [b"X-Big: " + b"a" * (LIMITS.max_head_bytes + 1) + b"\r\n"],
    ],
    ids=["count", "bytes"],
)
def test_an_oversized_head_is_a_431(sim: SimServer, headers: list[bytes]) -> None:
    answer = _exchange(sim, _head(*headers))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == 431 and "request head" in error["message"]
    assert _exchange(sim, _head()).startswith(b"HTTP/1.1 200")


def test_a_flood_of_headers_is_cut_at_the_limit(sim: SimServer) -> None:
    flood = _head(*[b"X-Huge: " + b"a" * 8000 + b"\r\n"] * 2000)  # 16 MB
    answer = _exchange(sim, flood)
    # The server stops reading at the limit; the client may see the 431 or a reset.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 ")
    assert _exchange(sim, _head()).startswith(b"HTTP/1.1 200")


def test_a_head_within_the_limits_is_served(sim: SimServer) -> None:
    headers = [b"X-Fine-%d: %s\r\n" % (i, b"v" * 100) for i in range(LIMITS.max_headers - 3)]
    assert _exchange(sim, _head(*headers)).startswith(b"HTTP/1.1 200")
