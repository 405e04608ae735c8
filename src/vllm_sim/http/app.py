"""The application: routing, CORS, access checks, body limits and error shapes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from vllm_sim.errors import RequestError
from vllm_sim.http.access import Guard, cross_origin, is_control
from vllm_sim.http.cors import Cors
from vllm_sim.http.messages import (
    JSON,
    AnyResponse,
    BodyTooLarge,
    Exchange,
    Fields,
    Handler,
    Headers,
    HttpRequest,
    Response,
    StreamingResponse,
    declared_length,
    error_body,
    error_response,
    header_fields,
    validation_error,
)

log = logging.getLogger("vllm_sim.server")

_NONE: Headers = []  # shared, never mutated
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

    async def handle(self, exchange: Exchange) -> None:
        """Answers one request, through the exchange the HTTP server gave it."""
        path = exchange.path
        method = exchange.method
        headers = exchange.headers
        route = self._routes.get(path) or self._match(path)
        if method == "OPTIONS":  # preflights are answered before routing, as in vLLM
            preflight = self._cors.preflight(headers, _shut(route, headers))
            if preflight is not None:
                exchange.respond(preflight, _NONE)
                return
        fields = header_fields(headers)
        declared = declared_length(fields)
        response, inside = await self._serve(exchange, route, fields, declared)
        extra = self._cors.response_headers(fields.get(b"origin")) if inside else _NONE
        if isinstance(response, StreamingResponse):
            await exchange.stream(response, extra)
            sent = 0
        else:
            sent = exchange.respond(response, extra)
        observer = self._observer
        if inside and observer is not None:
            observer(
                route.path if route is not None and method in route.methods else None,
                path,
                method,
                response.status,
                declared,
                sent,
                time.monotonic() - exchange.received,
            )

    async def _serve(
        self,
        exchange: Exchange,
        route: Route | None,
        fields: Fields,
        declared: int,
    ) -> tuple[AnyResponse, bool]:
        """The answer, and whether it got past vLLM's API-key layer, which wraps its CORS
        layer and its HTTP instrumentator: a refused key gets no CORS headers (a page cannot
        read why) and counts in no HTTP metric."""
        if route is None:
            return self._not_found(exchange.path), True
        method = exchange.method
        handler = route.methods.get(method)
        if handler is None:
            return _method_response(route, method), True
        refusal = _refusal(route, method, exchange.headers, fields)
        if refusal is not None:  # the unread body is dropped
            return _error(route, refusal), refusal.status != 401
        try:
            if declared > self.max_body_bytes:
                raise BodyTooLarge
            body = await exchange.read_body()
        except BodyTooLarge:
            limit_mb = self.max_body_bytes // (1024 * 1024)
            message = f"Request body exceeds the {limit_mb} MB limit (max-request-body-size-mb)"
            error = RequestError(413, message)
            return _error(route, error, [(b"connection", b"close")]), True
        if self.draining and route.refuses_when_draining:
            return _error(route, RequestError(503, "server is shutting down")), True
        request = HttpRequest(
            method,
            exchange.path,
            exchange.query,
            exchange.headers,
            body,
            exchange.on_disconnect,
            exchange.port,
            fields,
            exchange.received,
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
