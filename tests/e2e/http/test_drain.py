"""SIGTERM and idle connections: a kept-alive connection with no request on it is closed
at once when the server starts to stop (not at its keep-alive timeout), and the process
exits 0."""

from __future__ import annotations

import signal
import time

import pytest

from tests.e2e.http.wire_client import closed_by_peer, connect, read_until, request
from tests.support.server import SimServer


@pytest.mark.timing
def test_sigterm_closes_an_idle_kept_alive_connection_at_once() -> None:
    # Keep-alive 60 s: only the shutdown can close the connection within the test.
    sim = SimServer(env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "60"}).start()
    process = sim.process
    assert process is not None
    try:
        with connect(sim) as idle, connect(sim) as fresh:
            idle.sendall(request("GET", "/health"))
            assert read_until(idle, b"\r\n\r\n").startswith(b"HTTP/1.1 200 ")
            process.send_signal(signal.SIGTERM)
            start = time.monotonic()
            closed, data, seconds = closed_by_peer(idle, timeout=5.0)
            assert closed and data == b""
            assert seconds < 1.0
            # A connection that never sent a request is closed as promptly.
            closed, data, _ = closed_by_peer(fresh, timeout=5.0 - seconds)
            assert closed and data == b""
        assert process.wait(timeout=5.0) == 0
        assert time.monotonic() - start < 3.0
    finally:
        sim.stop()
