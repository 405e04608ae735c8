"""HTTP helpers shared by the server-level engine tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.errors import Answer, assert_openai_error
from tests.support.http import sse_events, token_times
from tests.support.server import SimServer

QUEUE_FULL = "Failed to enqueue request, waiting requests queue is full"
PROMPT = "This is a test."  # 5 simulated tokens

_GAUGE = re.compile(r"^(vllm:num_requests_(?:running|waiting))\{[^}]*\} ([0-9.eE+-]+)$", re.M)


def parse_gauges(text: str) -> tuple[int, int]:
    """(running, waiting) from a /metrics page."""
    values: dict[str, float] = {}
    for name, value in _GAUGE.findall(text):
        values[name] = values.get(name, 0.0) + float(value)
    assert "vllm:num_requests_running" in values, text
    assert "vllm:num_requests_waiting" in values, text
    running, waiting = values["vllm:num_requests_running"], values["vllm:num_requests_waiting"]
    return int(float(running)), int(float(waiting))


def gauges(sim: SimServer) -> tuple[int, int]:
    return parse_gauges(httpx.get(sim.url + "/metrics", timeout=5).text)


async def agauges(client: httpx.AsyncClient, sim: SimServer) -> tuple[int, int]:
    response = await client.get(sim.url + "/metrics", timeout=5)
    assert response.status_code == 200
    return parse_gauges(response.text)


async def wait_for_gauges(
    client: httpx.AsyncClient,
    sim: SimServer,
    running: int | None = None,
    waiting: int | None = None,
    timeout: float = 3.0,
) -> float:
    """Polls /metrics until the gauges match; returns how long that took."""
    start = time.monotonic()
    last = (-1, -1)
    while time.monotonic() - start < timeout:
        last = await agauges(client, sim)
        if (running is None or last[0] == running) and (waiting is None or last[1] == waiting):
            return time.monotonic() - start
        await asyncio.sleep(0.01)
    raise AssertionError(f"gauges stayed at {last}, wanted running={running} waiting={waiting}")


def completion_body(sim: SimServer, **extra: Any) -> dict[str, Any]:
    return {"model": sim.model, "prompt": PROMPT, "max_tokens": 3, **extra}


def chat_body(sim: SimServer, **extra: Any) -> dict[str, Any]:
    return {
        "model": sim.model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 3,
        **extra,
    }


@dataclass
class Outcome:
    """What one HTTP exchange produced, with client-side timings (seconds from send)."""

    status: int
    body: bytes = b""
    content_type: str = ""
    elapsed: float = 0.0
    # streaming: arrival time and parsed payload of every `data:` event except [DONE]
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    done: bool = False  # saw data: [DONE]

    def json(self) -> Any:
        return json.loads(self.body)

    # The Answer protocol of tests.support.errors, so that error checks read an Outcome too.
    @property
    def status_code(self) -> int:
        return self.status

    @property
    def headers(self) -> dict[str, str]:
        return {"content-type": self.content_type}

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    @property
    def token_times(self) -> list[float]:
        """Arrival times of events that carry generated text."""
        return token_times(self.events, per_choice=False)


async def post(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], timeout: float = 30.0
) -> Outcome:
    """POSTs and reads the whole answer; streams are read event by event."""
    start = time.monotonic()
    async with client.stream("POST", url, json=body, timeout=timeout) as response:
        outcome = Outcome(response.status_code, content_type=response.headers.get("content-type"))
        if response.status_code == 200 and body.get("stream"):
            data = [
                (time.monotonic() - start, line[len("data: ") :])
                async for line in response.aiter_lines()
                if line.startswith("data: ")
            ]
            outcome.events, outcome.done = sse_events(data)
        else:
            outcome.body = await response.aread()
        outcome.elapsed = time.monotonic() - start
    return outcome


async def raw_post(
    sim: SimServer, path: str, body: dict[str, Any]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Sends a POST on a raw socket, so that a test can hang up whenever it likes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{sim.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    writer.write(head.encode() + payload)
    await writer.drain()
    return reader, writer


async def hang_up(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def assert_queue_full(answer: Answer) -> None:
    """The 429 of a request the waiting queue has no room for."""
    assert_openai_error(answer, 429, QUEUE_FULL, error_type="RateLimitError", param=None)


def run(test: Callable[[], Awaitable[None]]) -> None:
    """Runs an async test body with a 40 s ceiling."""
    asyncio.run(asyncio.wait_for(test(), timeout=40))


def run_with_client(
    test: Callable[[httpx.AsyncClient], Awaitable[None]], idle: SimServer | None = None
) -> None:
    """Runs an async test body with its own client, under `run`'s ceiling; with `idle`, then
    checks that this server has no request running or waiting any more."""

    async def main() -> None:
        async with httpx.AsyncClient() as client:
            await test(client)
            if idle is not None:
                assert await agauges(client, idle) == (0, 0)

    run(main)


def exit_status(
    server: SimServer, test: Callable[[httpx.AsyncClient], Awaitable[None]], timeout: float
) -> int:
    """Runs an async test body that stops `server`, then its exit status within `timeout`
    seconds; a process still running after that is killed."""
    process = server.process
    assert process is not None
    try:
        run_with_client(test)
        return process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
