"""The application: routing, CORS, per-route checks, body limits and error answers."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from vllm_sim.errors import RequestError
from vllm_sim.http.cors import Cors
from vllm_sim.http.messages import (
    AnyResponse,
    BodyTooLarge,
    Dialect,
    ErrorRenderer,
    Exchange,
    Fields,
    Handler,
    Headers,
    HttpRequest,
    Response,
    StreamingResponse,
    declared_length,
    header_fields,
)

log = logging.getLogger("vllm_sim.server")

_NONE: Headers = []  # shared, never mutated
# (method, headers) -> the refusal, or None to go on. Header names are lower case.
Guard = Callable[[str, Headers], RequestError | None]
# A POST's Content-Type (None without one) -> the refusal, or None to go on.
ContentCheck = Callable[[bytes | None], RequestError | None]


@dataclass(frozen=True, slots=True)
class Route:
    # An exact path, or a pattern whose `{name}` segments each match one non-empty segment
    # (`/items/{item_id}`); the handler reads the value from `request.path`.
    path: str
    methods: dict[str, Handler]
    # Who may call it; runs before the body is read. None: anyone.
    guard: Guard | None = None
    # The envelope of every error answered on this route (and on unknown paths below it),
    # the kernel's own 401/404/405/413/415/500/503 included. None: the application's.
    error_body: ErrorRenderer | None = None
    # The media types its POST body may have, checked after the guard and before the body
    # is read. None: any.
    content_check: ContentCheck | None = None
    # Whether a CORS preflight must fail whatever the policy, for a route whose guard
    # refuses the browser request it would announce (None: the policy decides).
    refuses_preflight: Callable[[Headers], bool] | None = None

    @property
    def allow_header(self) -> bytes:
        return ", ".join(sorted(self.methods)).encode()  # OPTIONS is answered, not listed


class RequestObserver(Protocol):
    """Told of every request the application answered, once the answer is sent (the HTTP
    metrics, injected by the layer that owns them)."""

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
    """One router for every endpoint; handlers get a fully read HttpRequest. `dialect`
    words the errors the application answers itself, on routes that bring no envelope."""

    def __init__(
        self,
        routes: list[Route],
        max_body_bytes: int,
        cors: Cors | None = None,
        observer: RequestObserver | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self.dialect = dialect = dialect or Dialect()
        routes = [
            route
            if route.error_body is not None
            else dataclasses.replace(route, error_body=dialect.error_body)
            for route in routes
        ]
        self._routes = {route.path: route for route in routes if not _is_pattern(route.path)}
        self._patterns = [
            (route.path.split("/"), route) for route in routes if _is_pattern(route.path)
        ]
        self.max_body_bytes = max_body_bytes
        self._cors = cors or Cors()  # no other origin is allowed unless configured
        self._observer = observer

    async def handle(self, exchange: Exchange) -> None:
        """Answers one request, through the exchange the HTTP server gave it."""
        path = exchange.path
        method = exchange.method
        headers = exchange.headers
        route = self._routes.get(path) or self._match(path)
        if method == "OPTIONS":  # preflights are answered before routing
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
        """The answer, and whether it got past the authentication layer, which wraps the
        CORS layer and the request observer: a refused key (401) gets no CORS headers (a
        page cannot read why) and is observed by no one."""
        if route is None:
            return self._not_found(exchange.path), True
        method = exchange.method
        handler = route.methods.get(method)
        if handler is None:
            return self._method_response(route, method), True
        refusal = _refusal(route, method, exchange.headers, fields)
        if refusal is not None:  # the unread body is dropped
            return self._error(route, refusal), refusal.status != 401
        try:
            if declared > self.max_body_bytes:
                raise BodyTooLarge
            body = await exchange.read_body()
        except BodyTooLarge:
            error = RequestError(413, self.dialect.too_large(self.max_body_bytes))
            return self._error(route, error, [(b"connection", b"close")]), True
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
        return await self._call(handler, request, route), True

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
        """404, in the envelope of the route the path lies under (/items/x: /items'),
        else the application's."""
        error = RequestError(404, "Not Found")
        owner = max(
            (r for r in self._routes.values() if path.startswith(r.path + "/")),
            key=lambda r: len(r.path),
            default=None,
        )
        if owner is None:
            return Response(404, self.dialect.error_body(error), self.dialect.media_type)
        return self._error(owner, error)

    def _method_response(self, route: Route, method: str) -> Response:
        allow = (b"allow", route.allow_header)
        if method == "OPTIONS":
            return Response(200, b"", b"text/plain; charset=utf-8", [allow])
        return self._error(route, RequestError(405, "Method Not Allowed"), [allow])

    def _error(self, route: Route, error: RequestError, headers: Headers | None = None) -> Response:
        render = route.error_body or self.dialect.error_body
        return Response(error.status, render(error), self.dialect.media_type, headers or [])

    async def _call(self, handler: Handler, request: HttpRequest, route: Route) -> AnyResponse:
        try:
            return await handler(request)
        except RequestError as error:
            return self._error(route, error)
        except Exception:  # a bug must cost one request, never the server
            log.exception("unhandled error serving %s %s", request.method, request.path)
            return self._error(route, RequestError(500, "Internal server error"))


def _shut(route: Route | None, headers: Headers) -> bool:
    """Whether a preflight must fail whatever the CORS policy."""
    veto = route.refuses_preflight if route is not None else None
    return veto is not None and veto(headers)


def _refusal(route: Route, method: str, headers: Headers, fields: Fields) -> RequestError | None:
    """What refuses a request before its body is read: the route's guard, then, for a POST,
    its content check."""
    guard = route.guard
    if guard is not None:
        refusal = guard(method, headers)
        if refusal is not None:
            return refusal
    check = route.content_check
    if method != "POST" or check is None:
        return None
    return check(fields.get(b"content-type"))


def _is_parameter(segment: str) -> bool:
    return segment.startswith("{") and segment.endswith("}")


def _is_pattern(path: str) -> bool:
    return any(_is_parameter(segment) for segment in path.split("/"))


def path_parameter(pattern: str, path: str, name: str) -> str:
    """The value the `{name}` segment of `pattern` took in `path` (a path the route matched)."""
    return path.split("/")[pattern.split("/").index("{" + name + "}")]
