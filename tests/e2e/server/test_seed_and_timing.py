"""Determinism from --seed across restarts, readiness during --startup-duration, and timing:
stream headers go out at once, `created` is the arrival time."""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from typing import Any

import httpx
import pytest

from tests.support.fixtures import server_fixture
from tests.support.http import (
    CHAT,
    COMPLETIONS,
    EOS_TOKENS,
    ascii_tokens,
    chat_body,
    is_bank_text,
    parse_sse,
    post,
    stream_post,
)
from tests.support.server import SimServer

TTFT = 1.5


def _start_all(stack: contextlib.ExitStack, servers: list[SimServer]) -> list[SimServer]:
    """Starts servers in parallel (each start costs ~0.5 s)."""

    def stop(server: SimServer) -> None:
        if server.process is not None:
            server.stop()

    for server in servers:
        stack.callback(stop, server)
    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        return list(pool.map(SimServer.start, servers))


SCRIPT: list[tuple[str, dict[str, Any]]] = [
    (CHAT, chat_body("Hello")),
    (COMPLETIONS, {"prompt": "This is a test.", "max_tokens": 40}),
    (CHAT, chat_body("Hello", n=2, max_tokens=30)),
]


def _texts(sim: SimServer) -> list[str]:
    texts = []
    with httpx.Client(base_url=sim.url, timeout=30) as http:
        for path, body in SCRIPT:
            reply = post(http, path, body).json()
            for choice in reply["choices"]:
                texts.append(choice["message"]["content"] if path == CHAT else choice["text"])
    return texts


def test_same_seed_same_replies_and_stream_matches() -> None:
    with contextlib.ExitStack() as stack:
        a, b, streamed, other = _start_all(
            stack,
            [
                SimServer(["--seed", "7"]),
                SimServer(["--seed", "7"]),
                SimServer(["--seed", "7"]),
                SimServer(["--seed", "8"]),
            ],
        )
        first = _texts(a)
        assert all(is_bank_text(text) for text in first)
        assert _texts(b) == first, "same seed, fresh server: identical sequence of replies"
        assert _texts(other) != first, "another seed gives other replies"

        # The same first request, streamed, on a fresh server with the same seed.
        with httpx.Client(base_url=streamed.url, timeout=30) as http:
            body = {**SCRIPT[0][1], "stream": True, "stream_options": {"include_usage": True}}
            sse = stream_post(http, CHAT, body)
        pieces = [
            c["choices"][0]["delta"]["content"]
            for c in sse.chunks
            if c["choices"] and c["choices"][0]["delta"].get("content")
        ]
        assert "".join(pieces) == first[0]
        # A stop adds its end-of-sequence token: a chunk without text, counted in usage.
        finish = sse.chunks[-2]["choices"][0]["finish_reason"]
        eos = EOS_TOKENS if finish == "stop" else 0
        assert sse.chunks[-1]["usage"]["completion_tokens"] == len(pieces) + eos
        assert len(pieces) == len(ascii_tokens(first[0]))


# ------------------------------------------------------------------- readiness


@pytest.mark.timing
def test_ready_is_503_during_startup_duration() -> None:
    with SimServer(["--startup-duration", "1s"]) as sim:
        started = time.monotonic()
        assert httpx.get(sim.url + "/health/ready").status_code == 503
        assert httpx.get(sim.url + "/health").status_code == 200
        while time.monotonic() - started < 5:
            status = httpx.get(sim.url + "/health/ready").status_code
            if status == 200:
                break
            assert status == 503
            time.sleep(0.05)
        else:
            pytest.fail("/health/ready never became 200")
        elapsed = time.monotonic() - started
        assert 0.3 <= elapsed <= 2.0, elapsed
        assert httpx.get(sim.url + "/health/ready").status_code == 200


# ---------------------------------------------------------------------- timing


slow = server_fixture(["--time-to-first-token", f"{TTFT}s", "--max-num-seqs", "8"])


def _timed_stream(sim: SimServer) -> dict[str, Any]:
    body = chat_body("Hello", max_tokens=3, stream=True)
    with httpx.Client(base_url=sim.url, timeout=30) as http:
        sent = time.time()
        start = time.monotonic()
        with http.stream("POST", CHAT, json=body) as response:
            headers_at = time.monotonic() - start
            assert response.status_code == 200
            first_at = None
            raw = b""
            for piece in response.iter_raw():
                if first_at is None and piece:
                    first_at = time.monotonic() - start
                raw += piece
    return {"sent": sent, "headers_at": headers_at, "first_at": first_at, "raw": raw}


def _timed_plain(sim: SimServer) -> dict[str, Any]:
    with httpx.Client(base_url=sim.url, timeout=30) as http:
        sent = time.time()
        reply = post(http, COMPLETIONS, {"prompt": "Hello", "max_tokens": 3}).json()
        return {"sent": sent, "done": time.time(), "reply": reply}


@pytest.mark.timing
def test_stream_headers_go_out_at_once_and_created_is_arrival(slow: SimServer) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        streamed_future = pool.submit(_timed_stream, slow)
        plain_future = pool.submit(_timed_plain, slow)
        streamed = streamed_future.result()
        plain = plain_future.result()

    # Headers before the first token; the first token after the TTFT.
    assert streamed["headers_at"] < 0.6 * TTFT, streamed["headers_at"]
    assert streamed["first_at"] is not None
    assert streamed["first_at"] >= TTFT - 0.3, streamed["first_at"]

    # `created` is the arrival second: at most a moment after sending, far before the end.
    chunks = parse_sse(streamed["raw"]).chunks
    created = {chunk["created"] for chunk in chunks}
    assert len(created) == 1
    [stream_created] = created
    assert int(streamed["sent"]) <= stream_created <= streamed["sent"] + 0.3

    reply = plain["reply"]
    assert plain["done"] - plain["sent"] >= TTFT - 0.3
    assert int(plain["sent"]) <= reply["created"] <= plain["sent"] + 0.3
