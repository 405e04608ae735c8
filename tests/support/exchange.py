"""Drives the application without a server: a recording Exchange, for unit tests of the
routing, access and error layers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vllm_sim.http.app import App
from vllm_sim.http.messages import BodyTooLarge, Headers, Response, StreamingResponse


@dataclass
class Answer:
    status: int = 0
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    read: bool = False  # whether the application read the request body

    def header(self, name: bytes) -> bytes | None:
        return next((value for key, value in self.headers if key == name), None)


class RecordingExchange:
    """One request, and what the application answered to it."""

    def __init__(
        self,
        method: str,
        path: str,
        headers: Headers,
        body: bytes = b"",
        query: bytes = b"",
        limit: int | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.port = 8000
        self.received = time.monotonic()
        self.answer = Answer()
        self._body = body
        self._limit = limit

    async def read_body(self) -> bytes:
        self.answer.read = True
        if self._limit is not None and len(self._body) > self._limit:
            raise BodyTooLarge
        return self._body

    def on_disconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        return lambda: None

    def respond(self, response: Response, extra: Headers) -> int:
        self._head(response.status, response.headers, extra, response.content_type)
        self.answer.body = response.body
        return len(response.body)

    async def stream(self, response: StreamingResponse, extra: Headers) -> None:
        self._head(response.status, response.headers, extra, response.content_type)
        parts: list[bytes] = []

        async def write(data: bytes) -> None:
            parts.append(data)

        await response.produce(write)
        self.answer.body = b"".join(parts)

    def _head(self, status: int, headers: Headers, extra: Headers, content_type: bytes) -> None:
        self.answer.status = status
        self.answer.headers = [*headers, *extra]
        if content_type:
            self.answer.headers.append((b"content-type", content_type))


async def exchange(
    app: App,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Sequence[tuple[bytes, bytes]] = (),
    query: bytes = b"",
) -> Answer:
    """What `app` answers to one request."""
    request = RecordingExchange(method, path, list(headers), body, query, app.max_body_bytes)
    await app.handle(request)
    return request.answer


def call_app(
    app: App,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Sequence[tuple[bytes, bytes]] = (),
    query: bytes = b"",
) -> Answer:
    """`exchange` on a loop of its own."""
    return asyncio.run(exchange(app, method, path, body, headers, query))
