"""CORS on the wire, as vLLM 0.32 answers it: no other site by default (a preflight gets
400 `Disallowed CORS origin`), the configured origins named on every answer, streams
included, and the control routes closed to other sites whatever the flags say."""

from __future__ import annotations

import json

import httpx

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import CHAT, chat_body, post

SITE = "https://ui.example"
OTHER = "https://evil.example"
PREFLIGHT_VARY = (
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
    "Access-Control-Request-Private-Network"
)

default = server_fixture()
default_client = http_fixture("default")
configured = server_fixture(
    [
        "--allowed-origins", json.dumps([SITE]),
        "--allow-credentials",
        "--api-key", "sk-cors",
        "--max-num-seqs", "8",
    ],
    env={"VLLM_SERVER_DEV_MODE": "1"},
)  # fmt: skip
client = http_fixture("configured")
KEY = {"authorization": "Bearer sk-cors"}


def preflight(
    http: httpx.Client, path: str, origin: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    asked = {"origin": origin, "access-control-request-method": "POST", **(headers or {})}
    return http.options(path, headers=asked)


def test_by_default_no_other_site_is_allowed(default_client: httpx.Client) -> None:
    response = preflight(default_client, CHAT, OTHER)
    assert (response.status_code, response.text) == (400, "Disallowed CORS origin")
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["vary"] == PREFLIGHT_VARY
    assert response.headers["access-control-allow-methods"] == (
        "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, QUERY"
    )
    assert response.headers["access-control-max-age"] == "600"
    assert "access-control-allow-origin" not in response.headers
    models = default_client.get("/v1/models", headers={"origin": OTHER})
    assert models.status_code == 200
    assert "access-control-allow-origin" not in models.headers
    assert models.headers["vary"] == "Origin"


def test_an_options_without_preflight_headers_is_routed(default_client: httpx.Client) -> None:
    response = default_client.options(CHAT)
    assert response.status_code == 200
    assert response.headers["allow"] == "POST"  # the route's own methods, as a 405 lists them


def test_a_configured_site_passes_its_preflight(client: httpx.Client) -> None:
    asked = {"access-control-request-headers": "authorization, content-type"}
    response = preflight(client, CHAT, SITE, asked)  # no key: preflights carry none
    assert (response.status_code, response.text) == (200, "OK")
    assert response.headers["access-control-allow-origin"] == SITE
    assert response.headers["access-control-allow-credentials"] == "true"
    assert response.headers["access-control-allow-headers"] == "authorization, content-type"
    assert response.headers["access-control-max-age"] == "600"
    assert preflight(client, CHAT, OTHER).text == "Disallowed CORS origin"
    assert preflight(client, "/no/such/route", SITE).status_code == 200  # before routing


def test_its_answers_name_it(client: httpx.Client) -> None:
    headers = {"origin": SITE, **KEY}
    answer = post(client, CHAT, chat_body(max_tokens=2), headers=headers)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == SITE
    assert answer.headers["access-control-allow-credentials"] == "true"
    assert answer.headers["vary"] == "Origin"
    error = post(client, CHAT, {**chat_body(), "n": "x"}, headers=headers)
    assert error.status_code == 400 and error.headers["access-control-allow-origin"] == SITE
    foreign = post(client, CHAT, chat_body(max_tokens=2), headers={"origin": OTHER, **KEY})
    assert foreign.status_code == 200  # CORS only tells browsers what a page may read
    assert "access-control-allow-origin" not in foreign.headers


def test_streams_carry_the_headers(client: httpx.Client) -> None:
    body = chat_body(max_tokens=3, stream=True)
    with client.stream("POST", CHAT, json=body, headers={"origin": SITE, **KEY}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["access-control-allow-origin"] == SITE
        assert response.read().endswith(b"data: [DONE]\n\n")


def test_a_refused_key_carries_none(client: httpx.Client) -> None:
    """vLLM checks keys outside its CORS layer: even the configured site cannot read why."""
    response = post(client, CHAT, chat_body(), headers={"origin": SITE})
    assert_openai_error(response, 401)
    assert "access-control-allow-origin" not in response.headers


def test_control_routes_stay_closed_to_other_sites(client: httpx.Client) -> None:
    for path in ("/admin/config", "/v1/load_lora_adapter", "/sleep"):
        response = preflight(client, path, SITE)
        assert (response.status_code, response.text) == (400, "Disallowed CORS origin"), path
        assert "access-control-allow-origin" not in response.headers
    body = json.dumps({"failure-injection-rate": 100})
    attack = client.post(
        "/admin/config",
        content=body,
        headers={"origin": SITE, "content-type": "application/json", **KEY},
    )
    assert_openai_error(attack, 403, error_type="PermissionDeniedError")
    shown = client.get("/admin/config", headers=KEY).json()
    assert shown["failure-injection-rate"] == 0
    assert shown["allowed-origins"] == [SITE] and shown["allow-credentials"] is True
