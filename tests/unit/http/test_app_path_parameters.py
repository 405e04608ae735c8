"""Routes with `{name}` segments: each matches one non-empty segment, exact routes win, and
the kernel's 404, 405 and guards apply to them as to any route."""

from __future__ import annotations

from tests.support.exchange import product_app
from tests.unit.http.test_app_errors import call
from vllm_sim.errors import RequestError
from vllm_sim.http.app import App, Route, path_parameter
from vllm_sim.http.messages import AnyResponse, Headers, HttpRequest
from vllm_sim.protocols.common.answers import json_response

ITEM = "/v1/things/{thing_id}"
CANCEL = "/v1/things/{thing_id}/cancel"


async def item(request: HttpRequest) -> AnyResponse:
    return json_response({"item": path_parameter(ITEM, request.path, "thing_id")})


async def cancel(request: HttpRequest) -> AnyResponse:
    return json_response({"cancel": path_parameter(CANCEL, request.path, "thing_id")})


async def listing(request: HttpRequest) -> AnyResponse:
    return json_response({"list": True})


def refuse_all(method: str, headers: Headers) -> RequestError | None:
    return RequestError(401, "no")


def app() -> App:
    routes = [
        Route(ITEM, {"GET": item}),
        Route(CANCEL, {"POST": cancel}),
        Route("/v1/things/special", {"GET": listing}),
        Route("/v1/things", {"POST": listing}),
        Route("/locked/{x}", {"GET": item}, guard=refuse_all),
    ]
    return product_app(routes, 100)


def test_a_parameter_takes_one_segment() -> None:
    server = app()
    assert call(server, "GET", "/v1/things/abc")[:2] == (200, {"item": "abc"})
    assert call(server, "POST", "/v1/things/a-1/cancel")[:2] == (200, {"cancel": "a-1"})
    assert call(server, "GET", "/v1/things/special")[:2] == (200, {"list": True})  # exact wins


def test_unmatched_shapes_are_404_and_wrong_methods_405() -> None:
    server = app()
    for path in ("/v1/things/", "/v1/things/a/b", "/v1/things//cancel", "/v1/things/a/cancel/x"):
        assert call(server, "GET", path)[0] == 404, path
    assert call(server, "POST", "/v1/things/abc")[0] == 405
    assert call(server, "GET", "/v1/things/abc/cancel")[0] == 405


def test_guards_run_on_pattern_routes_before_the_body() -> None:
    status, _, read = call(app(), "GET", "/locked/x", body=b"{}")
    assert status == 401 and not read
