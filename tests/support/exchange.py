"""Drives the application without a server: a recording Exchange, for unit tests of the
routing, access and error layers."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_sim.http.app import App, Route
from vllm_sim.http.messages import BodyTooLarge, Headers, Response, StreamingResponse
from vllm_sim.transports.http.access import ControlGuard, cross_origin
from vllm_sim.transports.http.conventions import OPENAI_DIALECT, require_json


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


def product_app(routes: list[Route], max_body_bytes: int, **options: Any) -> App:
    """An App composed as the server composes it: the API's error envelope, JSON-only POST
    bodies, and a control guard's own media rule and closed preflights."""
    composed = []
    for route in routes:
        if isinstance(route.guard, ControlGuard):
            route = dataclasses.replace(route, refuses_preflight=cross_origin)
        else:
            route = dataclasses.replace(route, content_check=require_json)
        composed.append(route)
    return App(composed, max_body_bytes, dialect=OPENAI_DIALECT, **options)
