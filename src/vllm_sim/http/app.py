"""The ASGI application: routing, CORS, body limits, error shapes and response writing."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vllm_sim.errors import RequestError
from vllm_sim.http.access import Guard, cross_origin, is_control
from vllm_sim.http.cors import Cors
from vllm_sim.http.messages import (
    JSON,
    AnyResponse,
    Fields,
    Handler,
    Headers,
    HttpRequest,
    Response,
    StreamingResponse,
    error_body,
    error_response,
    header_fields,
    validation_error,
)

log = logging.getLogger("vllm_sim.server")

Scope = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
ErrorRenderer = Callable[[RequestError], bytes]


@dataclass(frozen=True, slots=True)
class Route:
    # An exact path, or a pattern whose `{name}` segments each match one non-empty segment
    # (`/v1/responses/{response_id}`); the handler reads the value from `request.path`.
    path: str
    methods: dict[str, Handler]
    # Generation endpoints refuse new work while the server drains for shutdown.
    refuses_when_draining: bool = False
    # Who may call it (API key, control checks); runs before the body is read. None: anyone.
    guard: Guard | None = None
    # The envelope of every error answered on this route (and on unknown paths below it),
    # the kernel's own 401/404/405/413/415/500/503 included.
    error_body: ErrorRenderer = error_body
    # Whether its POST reads a JSON body, and so refuses another content type as vLLM does
    # (its /ping and cancel routes read none).
    reads_json: bool = True

    @property
    def allow_header(self) -> bytes:
        return ", ".join(sorted(self.methods)).encode()  # as vLLM lists them: no OPTIONS


class _BodyTooLarge(Exception):
    pass


class RequestObserver(Protocol):
    """Told of every request the application answered, once the answer is sent: vLLM's HTTP
    instrumentator (injected by the server layer, which owns the metrics)."""

    def __call__(
        self,
        route: str | None,  # the template of the route that took it; None: no route took it
        path: str,
        method: str,
        status: int,
        request_bytes: int,  # its Content-Length header, 0 without one
        response_bytes: int,  # the answer's Content-Length, 0 for a stream
        seconds: float,  # from arrival until the answer's last byte was handed on
    ) -> None: ...


class App:
    """One router for every endpoint; handlers get a fully read HttpRequest."""

    def __init__(
        self,
        routes: list[Route],
        max_body_bytes: int,
        cors: Cors | None = None,
        observer: RequestObserver | None = None,
    ) -> None:
        self._routes = {route.path: route for route in routes if not _is_pattern(route.path)}
        self._patterns = [
            (route.path.split("/"), route) for route in routes if _is_pattern(route.path)
        ]
        self.max_body_bytes = max_body_bytes
        self.draining = False
        self._cors = cors or Cors()  # vLLM's defaults: no other origin is allowed
        self._observer = observer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        received = time.monotonic()
        path: str = scope["path"]
        method: str = scope["method"]
        headers: Headers = scope["headers"]
        route = self._routes.get(path) or self._match(path)
        if method == "OPTIONS":  # preflights are answered before routing, as in vLLM
            preflight = self._cors.preflight(headers, _shut(route, headers))
            if preflight is not None:
                await _send(send, preflight)
                return
        fields = header_fields(headers)
        length = fields.get(b"content-length")
        declared = int(length) if length is not None and length.isdigit() else 0
        response, inside = await self._serve(scope, receive, route, fields, declared, received)
        extra = self._cors.response_headers(fields.get(b"origin")) if inside else ()
        sent = await _send(send, response, extra)
        observer = self._observer
        if inside and observer is not None:
            observer(
                route.path if route is not None and method in route.methods else None,
                path,
                method,
                response.status,
                declared,
                sent,
                time.monotonic() - received,
            )

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        route: Route | None,
        fields: Fields,
        declared: int,
        received: float,
    ) -> tuple[AnyResponse, bool]:
        """The answer, and whether it got past vLLM's API-key layer, which wraps its CORS
        layer and its HTTP instrumentator: a refused key gets no CORS headers (a page cannot
        read why) and counts in no HTTP metric."""
        if route is None:
            return self._not_found(scope["path"]), True
        method: str = scope["method"]
        handler = route.methods.get(method)
        if handler is None:
            return _method_response(route, method), True
        refusal = _refusal(route, method, scope["headers"], fields)
        if refusal is not None:  # uvicorn drops the unread body
            return _error(route, refusal), refusal.status != 401
        try:
            body = await self._read_body(declared, receive)
        except _BodyTooLarge:
            limit_mb = self.max_body_bytes // (1024 * 1024)
            message = f"Request body exceeds the {limit_mb} MB limit (max-request-body-size-mb)"
            error = RequestError(413, message)
            return _error(route, error, [(b"connection", b"close")]), True
        if self.draining and route.refuses_when_draining:
            return _error(route, RequestError(503, "server is shutting down")), True
        server = scope.get("server")
        port = server[1] if server else 0
        request = HttpRequest(
            method,
            scope["path"],
            scope["query_string"],
            scope["headers"],
            body,
            receive,
            port,
            fields,
            received,
        )
        return await _call(handler, request, route), True

    def _match(self, path: str) -> Route | None:
        """The pattern route `path` fits, if any (only paths no exact route serves)."""
        if not self._patterns:
            return None
        segments = path.split("/")
        for pattern, route in self._patterns:
            if len(pattern) == len(segments) and all(
                want == got or (_is_parameter(want) and got)
                for want, got in zip(pattern, segments, strict=True)
            ):
                return route
        return None

    def _not_found(self, path: str) -> Response:
        """404, in the envelope of the route the path lies under (/v1/messages/x: Anthropic's)."""
        error = RequestError(404, "Not Found")
        owner = max(
            (r for r in self._routes.values() if path.startswith(r.path + "/")),
            key=lambda r: len(r.path),
            default=None,
        )
        return error_response(error) if owner is None else _error(owner, error)

    async def _read_body(self, declared: int, receive: Receive) -> bytes:
        """The body; `declared` is its Content-Length (0 without one)."""
        limit = self.max_body_bytes
        if declared > limit:
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


def _shut(route: Route | None, headers: Headers) -> bool:
    """Whether a preflight must fail whatever the CORS policy: the control routes refuse
    every cross-origin browser request (access.py), so no preflight may promise one."""
    return route is not None and is_control(route.guard) and cross_origin(headers)


# vLLM's refusal of a body that is not JSON, on every route that reads one.
NOT_JSON = "Unsupported Media Type: Only 'application/json' is allowed"


def _refusal(route: Route, method: str, headers: Headers, fields: Fields) -> RequestError | None:
    """What refuses a request before its body is read: the route's guard, then vLLM's media
    rule. The control routes' guard checks their media type itself (415, and no
    Content-Type allowed); the other routes that read a JSON body follow vLLM."""
    guard = route.guard
    if guard is not None:
        refusal = guard(method, headers)
        if refusal is not None:
            return refusal
    if method != "POST" or not route.reads_json or is_control(guard):
        return None
    if not _declares_json(fields.get(b"content-type")):
        return validation_error(NOT_JSON)
    return None


def _declares_json(content_type: bytes | None) -> bool:
    """vLLM's test: the first Content-Type, lower-cased, is application/json up to its first
    `;` (parameters such as a charset may follow). A missing one is not JSON."""
    return content_type is not None and content_type.lower().partition(b";")[0] == JSON


def _is_parameter(segment: str) -> bool:
    return segment.startswith("{") and segment.endswith("}")


def _is_pattern(path: str) -> bool:
    return any(_is_parameter(segment) for segment in path.split("/"))


def path_parameter(pattern: str, path: str, name: str) -> str:
    """The value the `{name}` segment of `pattern` took in `path` (a path the route matched)."""
    return path.split("/")[pattern.split("/").index("{" + name + "}")]


def _method_response(route: Route, method: str) -> Response:
    allow = (b"allow", route.allow_header)
    if method == "OPTIONS":
        return Response(200, b"", b"text/plain; charset=utf-8", [allow])
    error = RequestError(405, "Method Not Allowed")
    return Response(405, route.error_body(error), headers=[allow])


def _error(route: Route, error: RequestError, headers: Headers | None = None) -> Response:
    return Response(error.status, route.error_body(error), JSON, headers or [])


async def _call(handler: Handler, request: HttpRequest, route: Route) -> AnyResponse:
    try:
        return await handler(request)
    except RequestError as error:
        return _error(route, error)
    except Exception:  # a bug must cost one request, never the server
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return _error(route, RequestError(500, "Internal server error"))


async def _send(
    send: Send, response: AnyResponse, extra: Sequence[tuple[bytes, bytes]] = ()
) -> int:
    """Writes a response; `extra` headers (CORS) are added to its own. Returns its
    Content-Length (0 for a stream, which has none)."""
    if isinstance(response, StreamingResponse):
        await _send_stream(send, response, extra)
        return 0
    size = len(response.body)
    length = (b"content-length", str(size).encode())
    headers = [length, *response.headers, *extra]
    if response.content_type:
        headers.append((b"content-type", response.content_type))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    body = response.body
    if size <= BODY_SLICE:
        await send({"type": "http.response.body", "body": body})
        return size
    # In slices: the server waits for the socket to drain between them, so a large answer
    # to a slow reader is not copied whole into the transport's buffer.
    for start in range(0, len(body), BODY_SLICE):
        piece = body[start : start + BODY_SLICE]
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return size


BODY_SLICE = 1 << 20


async def _send_stream(
    send: Send, response: StreamingResponse, extra: Sequence[tuple[bytes, bytes]]
) -> None:
    headers = [
        (b"content-type", response.content_type),
        (b"cache-control", b"no-cache"),
        *response.headers,
        *extra,
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
