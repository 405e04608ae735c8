"""The HTTP kernel answers its own errors (400/401/403/404/405/413/415/500/503) in the
envelope of the route they concern, and runs a route's guard and vLLM's media-type rule
before it reads the body."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.exchange import call_app, exchange, product_app
from vllm_sim.errors import RequestError
from vllm_sim.frontend.access import AdmissionGate, Drain, KeyRing, key_guard
from vllm_sim.http.app import App, Route
from vllm_sim.http.messages import AnyResponse, HttpRequest
from vllm_sim.protocols.common.answers import json_response
from vllm_sim.transports.http.access import control_guard, cross_origin


def custom(error: RequestError) -> bytes:
    return json.dumps({"type": "error", "error": {"status": error.status}}).encode()


async def ok(request: HttpRequest) -> AnyResponse:
    return json_response({"ok": True})


async def broken(request: HttpRequest) -> AnyResponse:
    raise ZeroDivisionError


def call(
    app: App,
    method: str,
    path: str,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> tuple[int, Any, bool]:
    """(status, decoded body, whether the app read the request body)."""
    headers = list(headers or [])
    if method == "POST" and all(name != b"content-type" for name, _ in headers):
        headers.append((b"content-type", b"application/json"))
    answer = call_app(app, method, path, body, headers)
    return answer.status, json.loads(answer.body), answer.read


def app(guard: Any = None) -> App:
    routes = [
        Route("/anth", {"POST": ok}, guard, custom),
        Route("/anth/broken", {"POST": broken}, error_body=custom),
        Route("/plain", {"POST": broken}),
    ]
    return product_app(routes, 10)


def test_a_bug_is_a_500_in_the_routes_envelope() -> None:
    assert call(app(), "POST", "/anth/broken")[:2] == (
        500,
        {"type": "error", "error": {"status": 500}},
    )
    status, body, _ = call(app(), "POST", "/plain")
    assert status == 500 and body["error"]["type"] == "InternalServerError"


def test_405_413_503_and_404_below_the_route() -> None:
    server = app()
    assert call(server, "GET", "/anth")[:2] == (405, {"type": "error", "error": {"status": 405}})
    too_big = [(b"content-length", b"11")]
    assert call(server, "POST", "/anth", b"x" * 11, too_big)[1]["error"] == {"status": 413}
    assert call(server, "POST", "/anth/nope")[1]["error"] == {"status": 404}
    assert "message" in call(server, "POST", "/elsewhere")[1]["error"]  # OpenAI's


def test_a_guards_refusal_is_worded_in_the_routes_envelope() -> None:
    drain = Drain()
    server = app(AdmissionGate(drain))
    assert call(server, "POST", "/anth")[0] == 200
    drain.active = True
    status, body, read = call(server, "POST", "/anth", b"{}")
    assert (status, body, read) == (503, {"type": "error", "error": {"status": 503}}, False)


def test_the_guard_runs_before_the_body_is_read() -> None:
    server = app(key_guard(KeyRing(["k"]), x_api_key=True))
    status, body, read = call(server, "POST", "/anth", b"{}")
    assert (status, body, read) == (401, {"type": "error", "error": {"status": 401}}, False)
    for header in ((b"authorization", b"Bearer k"), (b"x-api-key", b"k")):
        status, _, read = call(server, "POST", "/anth", b"{}", [header])
        assert status == 200 and read


def test_key_ring() -> None:
    ring = KeyRing(["alpha", "beta"])
    assert ring.accepts(b"alpha") and ring.accepts(b"beta")
    assert not ring.accepts(b"alph") and not ring.accepts(b"alphaa") and not ring.accepts(b"")
    assert not KeyRing([]).accepts(b"")


def test_x_api_key_only_where_asked() -> None:
    assert key_guard(KeyRing(["k"]))("GET", [(b"x-api-key", b"k")]) is not None


def test_cross_origin() -> None:
    host = (b"host", b"localhost:8000")
    assert not cross_origin([host])
    assert not cross_origin([host, (b"origin", b"http://localhost:8000")])
    assert not cross_origin([host, (b"origin", b"http://LOCALHOST:8000")])
    assert not cross_origin([host, (b"sec-fetch-site", b"same-origin")])
    assert not cross_origin([host, (b"sec-fetch-site", b"none")])  # typed in the address bar
    assert cross_origin([host, (b"origin", b"http://localhost:8001")])
    assert cross_origin([host, (b"origin", b"null")])
    assert cross_origin([host, (b"origin", b"http://[::1")])  # unparseable

    assert cross_origin([(b"origin", b"http://localhost:8000")])  # no Host: cannot match
    assert cross_origin([host, (b"sec-fetch-site", b"cross-site")])


def test_a_browser_must_name_the_server_by_address_or_localhost() -> None:
    # A page whose own name was rebound to this machine looks same-origin (DNS rebinding).
    for named in (b"127.0.0.1:8000", b"10.1.2.3", b"[::1]:8000", b"localhost"):
        headers = [(b"host", named), (b"origin", b"http://" + named)]
        assert not cross_origin(headers), named
    rebound = [(b"host", b"evil.example:8000"), (b"origin", b"http://evil.example:8000")]
    assert cross_origin(rebound)
    assert not cross_origin([(b"host", b"sim.internal:8000")])  # no Origin: not a browser


def test_control_guard_content_types() -> None:
    guard = control_guard(None)
    for accepted in (b"application/json", b"Application/JSON; charset=utf-8"):
        assert guard("POST", [(b"content-type", accepted)]) is None
    assert guard("POST", []) is None  # no body, or a script's bare bytes
    for refused in (b"text/plain", b"application/x-www-form-urlencoded", b"application/jsonx"):
        error = guard("POST", [(b"content-type", refused)])
        assert error is not None and error.status == 415
    assert guard("GET", [(b"content-type", b"text/plain")]) is None


NOT_JSON = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"


def test_a_post_body_must_be_json_as_vllm_requires() -> None:
    server = app()
    for refused in ([(b"content-type", b"text/plain")], [(b"content-type", b"")]):
        status, body, read = call(server, "POST", "/plain", b"{}", refused)
        assert (status, read) == (400, False)
        assert body == {
            "error": {"message": NOT_JSON, "type": "Bad Request", "param": None, "code": 400}
        }
    status, body, _ = call(server, "POST", "/anth", b"{}", [(b"content-type", b"text/plain")])
    assert (status, body) == (400, {"type": "error", "error": {"status": 400}})  # its envelope


def test_the_media_rule_reads_the_type_as_vllm_does() -> None:
    server = app()
    accepted = (b"application/json", b"Application/JSON", b"application/json; charset=utf-8")
    for content_type in accepted:
        assert call(server, "POST", "/anth", b"{}", [(b"content-type", content_type)])[0] == 200
    refused = (
        b"application/json ; charset=utf-8",  # vLLM compares up to the `;`, blanks included
        b"application/json-patch+json",
        b"application/jsonx",
        b"text/json",
    )
    for content_type in refused:
        status = call(server, "POST", "/anth", b"{}", [(b"content-type", content_type)])[0]
        assert status == 400, content_type


def test_no_content_type_is_refused_except_on_control_routes() -> None:
    async def raw(headers: list[tuple[bytes, bytes]], path: str, server: App) -> int:
        return (await exchange(server, "POST", path, b"{}", headers)).status

    server = product_app(
        [Route("/api", {"POST": ok}), Route("/control", {"POST": ok}, guard=control_guard(None))],
        10,
    )
    assert asyncio.run(raw([], "/api", server)) == 400  # vLLM refuses a missing type
    assert asyncio.run(raw([], "/control", server)) == 200  # `curl -X POST .../sleep`
    text = [(b"content-type", b"text/plain")]
    assert asyncio.run(raw(text, "/control", server)) == 415  # the control guard's rule


async def refuses_naming_a_lone_surrogate(request: HttpRequest) -> AnyResponse:
    raise RequestError(400, "unknown value \ud800", param="x")


def test_an_error_naming_a_lone_surrogate_still_encodes() -> None:
    routes = [Route("/r", {"POST": refuses_naming_a_lone_surrogate})]
    status, body, _ = call(product_app(routes, 10), "POST", "/r")
    assert status == 400 and body["error"]["message"] == "unknown value ?"
