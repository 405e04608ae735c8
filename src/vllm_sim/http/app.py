"""The ASGI application: routing, body limits, error shapes and response writing."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vllm_sim.errors import RequestError
from vllm_sim.http.messages import (
    AnyResponse,
    Handler,
    HttpRequest,
    Response,
    StreamingResponse,
    error_body,
    error_response,
)

log = logging.getLogger("vllm_sim.server")

Scope = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Route:
    path: str
    methods: dict[str, Handler]
    # Generation endpoints refuse new work while the server drains for shutdown.
    refuses_when_draining: bool = False

    @property
    def allow_header(self) -> bytes:
        return ", ".join([*sorted(self.methods), "OPTIONS"]).encode()


class _BodyTooLarge(Exception):
    pass


class App:
    """One router for every endpoint; handlers get a fully read HttpRequest."""

    def __init__(self, routes: list[Route], max_body_bytes: int) -> None:
        self._routes = {route.path: route for route in routes}
        self.max_body_bytes = max_body_bytes
        self.draining = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        route = self._routes.get(scope["path"])
        if route is None:
            await _send(send, error_response(RequestError(404, "Not Found")))
            return
        method: str = scope["method"]
        handler = route.methods.get(method)
        if handler is None:
            await _send(send, _method_response(route, method))
            return
        try:
            body = await self._read_body(scope, receive)
        except _BodyTooLarge:
            limit_mb = self.max_body_bytes // (1024 * 1024)
            message = f"Request body exceeds the {limit_mb} MB limit (max-request-body-size-mb)"
            error = RequestError(413, message)
            await _send(send, error_response(error, [(b"connection", b"close")]))
            return
        if self.draining and route.refuses_when_draining:
            await _send(send, error_response(RequestError(503, "server is shutting down")))
            return
        server = scope.get("server")
        port = server[1] if server else 0
        request = HttpRequest(
            method, scope["path"], scope["query_string"], scope["headers"], body, receive, port
        )
        response = await _call(handler, request)
        await _send(send, response)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.max_body_bytes
        for key, value in scope["headers"]:
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                raise _BodyTooLarge
        message = await receive()
        body: bytes = message.get("body", b"")
        if not message.get("more_body"):
            return body
        parts = [body]
        size = len(body)
        while message.get("more_body"):
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _BodyTooLarge
            parts.append(chunk)
        return b"".join(parts)


def _method_response(route: Route, method: str) -> Response:
    allow = (b"allow", route.allow_header)
    if method == "OPTIONS":
        return Response(200, b"", b"text/plain; charset=utf-8", [allow])
    error = RequestError(405, "Method Not Allowed")
    return Response(405, error_body(error), headers=[allow])


async def _call(handler: Handler, request: HttpRequest) -> AnyResponse:
    try:
        return await handler(request)
    except RequestError as error:
        return error_response(error)
    except Exception:  # a bug must cost one request, never the server
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return error_response(RequestError(500, "Internal server error"))


async def _send(send: Send, response: AnyResponse) -> None:
    if isinstance(response, StreamingResponse):
        await _send_stream(send, response)
        return
    headers = [(b"content-length", str(len(response.body)).encode()), *response.headers]
    if response.content_type:
        headers.append((b"content-type", response.content_type))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


async def _send_stream(send: Send, response: StreamingResponse) -> None:
    headers = [
        (b"content-type", response.content_type),
        (b"cache-control", b"no-cache"),
        *response.headers,
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})

    def write(chunk: bytes) -> Awaitable[None]:
        # Returns send's own awaitable: no extra coroutine frame per chunk.
        return send({"type": "http.response.body", "body": chunk, "more_body": True})

    try:
        await response.produce(write)
    except Exception:
        log.exception("stream failed")
    await send({"type": "http.response.body", "body": b"", "more_body": False})
