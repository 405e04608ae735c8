"""CORS as vLLM answers it (Starlette's middleware under vLLM's four flags): preflights
answered before routing, the headers of every other answer, and the control routes that
no policy opens to other sites."""

from __future__ import annotations

from typing import Any

from tests.support.exchange import call_app, product_app
from vllm_sim.frontend.access import KeyRing, key_guard
from vllm_sim.http.app import App, Route
from vllm_sim.http.cors import Cors, CorsPolicy
from vllm_sim.http.messages import AnyResponse, HttpRequest, Response
from vllm_sim.protocols.common.answers import json_response
from vllm_sim.transports.http.access import control_guard

SITE = b"https://ui.example"
OTHER = b"https://evil.example"
PREFLIGHT_VARY = (
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
    "Access-Control-Request-Private-Network"
)


def preflight(
    cors: Cors, origin: bytes = SITE, method: bytes = b"POST", *extra: tuple[bytes, bytes]
) -> Response:
    headers = [(b"origin", origin), (b"access-control-request-method", method), *extra]
    answer = cors.preflight(headers)
    assert answer is not None
    return answer


def named(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    as_text = {name.decode(): value.decode() for name, value in headers}
    assert len(as_text) == len(headers), headers  # no header twice
    return as_text


def test_by_default_no_other_origin_is_allowed() -> None:
    cors = Cors()
    answer = preflight(cors)
    assert (answer.status, answer.body) == (400, b"Disallowed CORS origin")
    assert answer.content_type == b"text/plain; charset=utf-8"
    assert named(answer.headers) == {
        "vary": PREFLIGHT_VARY,
        "access-control-allow-methods": "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, QUERY",
        "access-control-max-age": "600",
    }
    assert named(cors.response_headers(OTHER)) == {"vary": "Origin"}
    assert named(cors.response_headers(None)) == {"vary": "Origin"}


def test_not_a_preflight_is_left_to_the_routes() -> None:
    cors = Cors()
    assert cors.preflight([(b"origin", SITE)]) is None  # no method asked
    assert cors.preflight([(b"access-control-request-method", b"POST")]) is None  # no origin


def test_an_allowed_origin_is_named() -> None:
    cors = Cors(CorsPolicy(allowed_origins=(SITE.decode(),)))
    asked = (b"access-control-request-headers", b"Authorization, Content-Type")
    answer = preflight(cors, SITE, b"POST", asked)
    assert (answer.status, answer.body) == (200, b"OK")
    headers = named(answer.headers)
    assert headers["access-control-allow-origin"] == SITE.decode()
    assert headers["access-control-allow-headers"] == "Authorization, Content-Type"  # mirrored
    assert headers["access-control-max-age"] == "600" and headers["vary"] == PREFLIGHT_VARY
    assert "access-control-allow-credentials" not in headers
    assert named(cors.response_headers(SITE)) == {
        "access-control-allow-origin": SITE.decode(),
        "vary": "Origin",
    }
    assert named(cors.response_headers(OTHER)) == {"vary": "Origin"}
    assert preflight(cors, OTHER).body == b"Disallowed CORS origin"
    assert preflight(cors, SITE.upper()).status == 400  # an exact match


def test_a_wildcard_allows_any_origin_and_credentials_name_it() -> None:
    anyone = Cors(CorsPolicy(allowed_origins=("*",)))
    answer = preflight(anyone, OTHER)
    assert answer.status == 200
    assert named(answer.headers)["access-control-allow-origin"] == "*"
    assert named(anyone.response_headers(OTHER)) == {
        "access-control-allow-origin": "*",
        "vary": "Origin",
    }
    trusted = Cors(CorsPolicy(allowed_origins=("*",), allow_credentials=True))
    answer = preflight(trusted, OTHER)
    headers = named(answer.headers)
    assert headers["access-control-allow-origin"] == OTHER.decode()
    assert headers["access-control-allow-credentials"] == "true"
    assert named(trusted.response_headers(OTHER)) == {
        "access-control-allow-credentials": "true",
        "access-control-allow-origin": OTHER.decode(),
        "vary": "Origin",
    }


def test_credentials_are_announced_even_to_refused_origins() -> None:
    cors = Cors(CorsPolicy(allowed_origins=(SITE.decode(),), allow_credentials=True))
    assert named(cors.response_headers(OTHER)) == {
        "access-control-allow-credentials": "true",
        "vary": "Origin",
    }  # as Starlette does: without the origin named, a browser reads nothing anyway
    assert named(cors.response_headers(None)) == {"vary": "Origin"}


def test_methods_and_headers_can_be_narrowed() -> None:
    policy = CorsPolicy(
        allowed_origins=(SITE.decode(),), allowed_methods=("POST",), allowed_headers=("X-Key",)
    )
    cors = Cors(policy)
    answer = preflight(cors, SITE, b"POST", (b"access-control-request-headers", b"x-key, accept"))
    assert answer.status == 200
    headers = named(answer.headers)
    assert headers["access-control-allow-methods"] == "POST"
    assert headers["access-control-allow-headers"] == (
        "Accept, Accept-Language, Content-Language, Content-Type, X-Key"
    )
    assert preflight(cors, SITE, b"DELETE").body == b"Disallowed CORS method"
    assert preflight(cors, SITE, b"post").body == b"Disallowed CORS method"  # exact match
    wrong = preflight(cors, OTHER, b"GET", (b"access-control-request-headers", b"x-other"))
    assert wrong.body == b"Disallowed CORS origin, method, headers"


def test_the_private_network_is_never_opened() -> None:
    cors = Cors(CorsPolicy(allowed_origins=("*",)))
    answer = preflight(cors, SITE, b"GET", (b"access-control-request-private-network", b"true"))
    assert (answer.status, answer.body) == (400, b"Disallowed CORS private-network")


# ---------------------------------------------------------------- in the kernel


async def ok(request: HttpRequest) -> AnyResponse:
    return json_response({"ok": True})


def call(server: App, method: str, path: str, headers: list[tuple[bytes, bytes]]) -> Any:
    answer = call_app(server, method, path, b"{}", headers)
    return answer.status, dict(answer.headers), answer.body


def kernel(**policy: Any) -> App:
    routes = [
        Route("/v1/models", {"GET": ok}, guard=key_guard(KeyRing(["k"]))),
        Route("/admin/config", {"GET": ok}, guard=control_guard(None)),
        Route("/open", {"GET": ok}),
    ]
    return product_app(routes, 100, cors=Cors(CorsPolicy(**policy)))


def test_preflights_come_before_routing_and_keys() -> None:
    server = kernel(allowed_origins=(SITE.decode(),))
    asked = [(b"origin", SITE), (b"access-control-request-method", b"GET")]
    for path in ("/v1/models", "/nowhere"):
        status, headers, body = call(server, "OPTIONS", path, asked)
        assert (status, body) == (200, b"OK") and headers[b"access-control-allow-origin"] == SITE
    status, headers, _ = call(server, "OPTIONS", "/open", [])  # not a preflight: routed
    assert status == 200 and headers[b"allow"] == b"GET"  # vLLM's Allow: no OPTIONS


def test_every_answer_carries_the_headers_but_a_refused_key() -> None:
    server = kernel(allowed_origins=(SITE.decode(),))
    origin = (b"origin", SITE)
    for path, expected in (("/open", 200), ("/nowhere", 404)):
        status, headers, _ = call(server, "GET", path, [origin])
        assert status == expected
        assert headers[b"access-control-allow-origin"] == SITE and headers[b"vary"] == b"Origin"
    key = (b"authorization", b"Bearer k")
    status, headers, _ = call(server, "GET", "/v1/models", [origin, key])
    assert status == 200 and headers[b"access-control-allow-origin"] == SITE
    # vLLM checks keys outside its CORS layer: the 401 has no CORS headers at all
    status, headers, _ = call(server, "GET", "/v1/models", [origin])
    assert status == 401 and b"access-control-allow-origin" not in headers
    assert b"vary" not in headers


def test_no_policy_opens_a_control_route_to_another_site() -> None:
    server = kernel(allowed_origins=("*",), allow_credentials=True)
    host = (b"host", b"127.0.0.1:8000")
    asked = [host, (b"origin", SITE), (b"access-control-request-method", b"GET")]
    status, headers, body = call(server, "OPTIONS", "/admin/config", asked)
    assert (status, body) == (400, b"Disallowed CORS origin")
    assert b"access-control-allow-origin" not in headers
    assert call(server, "OPTIONS", "/open", asked)[0] == 200  # other routes follow the policy
    status, _, _ = call(server, "GET", "/admin/config", [host, (b"origin", SITE)])
    assert status == 403  # and the request itself is refused by access.py as before
    same_site = [host, (b"origin", b"http://127.0.0.1:8000")]
    same = call(server, "OPTIONS", "/admin/config", [*same_site, asked[2]])
    assert same[0] == 200  # the server's own page is no other site
