"""The HTTP kernel tells its observer (vLLM's HTTP instrumentator) of every request the
application answered: the route's template or none, the method, the status, the request's
Content-Length, the answer's (0 for a stream) and the time until the answer was sent.
Requests refused by vLLM's outer layers (API key, CORS preflight) are not told."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tests.support.exchange import call_app, product_app
from vllm_sim.frontend.access import KeyRing, key_guard
from vllm_sim.http.app import App, Route
from vllm_sim.http.cors import Cors, CorsPolicy
from vllm_sim.http.messages import AnyResponse, HttpRequest, StreamingResponse
from vllm_sim.protocols.common.answers import json_response


@dataclass(frozen=True)
class Told:
    route: str | None
    path: str
    method: str
    status: int
    request_bytes: int
    response_bytes: int
    seconds: float


class Observer:
    def __init__(self) -> None:
        self.told: list[Told] = []

    def __call__(
        self,
        route: str | None,
        path: str,
        method: str,
        status: int,
        request_bytes: int,
        response_bytes: int,
        seconds: float,
    ) -> None:
        self.told.append(Told(route, path, method, status, request_bytes, response_bytes, seconds))


async def ok(request: HttpRequest) -> AnyResponse:
    return json_response({"ok": True, "path": request.path})


async def stream(request: HttpRequest) -> AnyResponse:
    async def produce(write: Callable[[bytes], Awaitable[None]]) -> None:
        await asyncio.sleep(0.01)
        await write(b"data: 1\n\n")

    return StreamingResponse(produce)


def build(observer: Observer) -> App:
    keys = key_guard(KeyRing(("secret",)))
    routes = [
        Route("/v1/items", {"POST": ok, "GET": ok}),
        Route("/v1/items/{item_id}", {"GET": ok}),
        Route("/v1/stream", {"POST": stream}),
        Route("/v1/keyed", {"POST": ok}, guard=keys),
    ]
    cors = Cors(CorsPolicy(("https://ui.example",), ("*",), ("*",), False))
    return product_app(routes, 100, cors=cors, observer=observer)


def call(
    app: App,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> tuple[int, bytes]:
    """(status, body) of one request; `headers` come before the JSON content type, so that
    their own content type wins."""
    fields = [*headers, (b"content-type", b"application/json")]
    if body:
        fields.append((b"content-length", str(len(body)).encode()))
    answer = call_app(app, method, path, body, fields)
    return answer.status, answer.body


def test_a_routed_request_names_its_route_and_sizes() -> None:
    observer = Observer()
    status, answer = call(build(observer), "POST", "/v1/items", b'{"a": 1}')
    assert status == 200
    [told] = observer.told
    assert (told.route, told.path, told.method, told.status) == (
        "/v1/items",
        "/v1/items",
        "POST",
        200,
    )
    assert (told.request_bytes, told.response_bytes) == (8, len(answer))
    assert 0 <= told.seconds < 1


def test_a_pattern_route_is_named_by_its_template() -> None:
    observer = Observer()
    assert call(build(observer), "GET", "/v1/items/abc")[0] == 200
    assert [(t.route, t.path) for t in observer.told] == [("/v1/items/{item_id}", "/v1/items/abc")]


def test_no_route_or_a_method_it_does_not_take_is_no_route() -> None:
    observer = Observer()
    app = build(observer)
    assert call(app, "GET", "/nowhere")[0] == 404
    assert call(app, "DELETE", "/v1/items")[0] == 405
    assert [(t.route, t.path, t.method, t.status) for t in observer.told] == [
        (None, "/nowhere", "GET", 404),
        (None, "/v1/items", "DELETE", 405),
    ]


def test_a_stream_has_no_content_length_and_its_time_runs_to_the_end() -> None:
    observer = Observer()
    status, answer = call(build(observer), "POST", "/v1/stream", b"{}")
    assert status == 200 and answer == b"data: 1\n\n"
    [told] = observer.told
    assert (told.request_bytes, told.response_bytes) == (2, 0)
    assert told.seconds >= 0.01  # the whole stream, not only its start


def test_refusals_inside_the_application_are_told() -> None:
    observer = Observer()
    app = build(observer)
    assert call(app, "POST", "/v1/items", b"x" * 101)[0] == 413
    assert call(app, "POST", "/v1/items", b"{}", [(b"content-type", b"text/plain")])[0] == 400
    assert [(t.route, t.status, t.request_bytes) for t in observer.told] == [
        ("/v1/items", 413, 101),
        ("/v1/items", 400, 2),
    ]


def test_the_outer_layers_answers_are_not_told() -> None:
    """vLLM's API-key and CORS middlewares wrap its instrumentator: a refused key and a
    preflight never reach it."""
    observer = Observer()
    app = build(observer)
    assert call(app, "POST", "/v1/keyed", b"{}")[0] == 401
    preflight = [
        (b"origin", b"https://ui.example"),
        (b"access-control-request-method", b"POST"),
    ]
    assert call(app, "OPTIONS", "/v1/items", headers=preflight)[0] == 200
    assert observer.told == []
    keyed = [(b"authorization", b"Bearer secret")]
    assert call(app, "POST", "/v1/keyed", b"{}", keyed)[0] == 200
    assert [t.status for t in observer.told] == [200]
