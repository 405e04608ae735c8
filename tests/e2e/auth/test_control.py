"""The control endpoints refuse what a web page could send: cross-origin requests (403) and
bodies in a content type a browser sends without asking (415); --disable-admin removes
/admin/config and /fake_metrics. No key is configured here: these hold without one."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.server import SimServer

control = server_fixture(env={"VLLM_SERVER_DEV_MODE": "1"})
client = http_fixture("control")
no_admin = server_fixture(["--disable-admin"])

ATTACK = json.dumps({"failure-injection-rate": 100}).encode()
USER = [{"role": "user", "content": "Hi"}]

# What a page on another site can send without a CORS preflight.
SIMPLE_TYPES = ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"]


def failure_rate(client: httpx.Client) -> int:
    rate: int = client.get("/admin/config").json()["failure-injection-rate"]
    return rate


def chat_works(client: httpx.Client) -> bool:
    body = {"messages": USER, "max_tokens": 2}
    return all(client.post("/v1/chat/completions", json=body).status_code == 200 for _ in range(5))


def test_a_cross_origin_text_plain_post_changes_nothing(client: httpx.Client) -> None:
    """What `fetch("http://localhost:8000/admin/config", {method: "POST", mode: "no-cors",
    body: ...})` from any web page sends."""
    response = client.post(
        "/admin/config",
        content=ATTACK,
        headers={
            "content-type": "text/plain;charset=UTF-8",
            "origin": "https://evil.example",
            "sec-fetch-site": "cross-site",
        },
    )
    assert_openai_error(response, 403, error_type="PermissionDeniedError", param=None)
    assert failure_rate(client) == 0
    assert chat_works(client)


@pytest.mark.parametrize("content_type", [*SIMPLE_TYPES, "multipart/form-data; boundary=x"])
@pytest.mark.parametrize("path", ["/admin/config", "/fake_metrics", "/v1/load_lora_adapter"])
def test_control_posts_take_only_json(client: httpx.Client, path: str, content_type: str) -> None:
    response = client.post(path, content=ATTACK, headers={"content-type": content_type})
    assert_openai_error(response, 415, error_type="UnsupportedMediaTypeError", param=None)
    assert failure_rate(client) == 0


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "http://localhost:1"},  # same host, another port: another origin
        {"origin": "null"},  # sandboxed frames, no-referrer form posts
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/admin/config"),
        ("GET", "/admin/config"),
        ("POST", "/fake_metrics"),
        ("POST", "/v1/load_lora_adapter"),
        ("POST", "/v1/unload_lora_adapter"),
        ("POST", "/sleep"),
        ("POST", "/wake_up"),
        ("POST", "/reset_prefix_cache"),
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("GET", "/is_paused"),
    ],
)
def test_cross_origin_browser_requests_are_refused(
    client: httpx.Client, method: str, path: str, headers: dict[str, str]
) -> None:
    body = ATTACK if method == "POST" else None
    response = client.request(
        method, path, content=body, headers={"content-type": "application/json", **headers}
    )
    assert_openai_error(response, 403, error_type="PermissionDeniedError", param=None)
    assert failure_rate(client) == 0
    assert client.get("/is_paused").json() == {"is_paused": False}


def test_same_origin_json_is_accepted(control: SimServer, client: httpx.Client) -> None:
    headers = {
        "origin": f"http://127.0.0.1:{control.port}",
        "sec-fetch-site": "same-origin",
        "content-type": "application/json; charset=utf-8",
    }
    response = client.post(
        "/admin/config", content=b'{"failure-injection-rate": 0}', headers=headers
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", ["/sleep", "/wake_up", "/reset_prefix_cache", "/resume"])
def test_bodiless_posts_still_work(client: httpx.Client, path: str) -> None:
    """curl -X POST /sleep sends no body and no Content-Type: not a browser's request."""
    response = client.post(path)
    assert response.status_code in (200, 400), response.text  # 400: no --enable-sleep-mode
    assert response.status_code != 415


def test_inference_routes_follow_vllms_content_type_rule(client: httpx.Client) -> None:
    """Control routes answer 415; the others refuse as vLLM does (400, its wording)."""
    body = json.dumps({"messages": USER, "max_tokens": 2}).encode()
    response = client.post(
        "/v1/chat/completions", content=body, headers={"content-type": "text/plain"}
    )
    assert_openai_error(response, 400, error_type="Bad Request", contains="Unsupported Media")


# ------------------------------------------------------------------ --disable-admin


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/admin/config"), ("POST", "/admin/config"), ("POST", "/fake_metrics")],
)
def test_disable_admin_removes_the_admin_routes(
    no_admin: SimServer, method: str, path: str
) -> None:
    with httpx.Client(base_url=no_admin.url, timeout=30) as http:
        response = http.request(method, path, json={"failure-injection-rate": 100})
        assert_openai_error(response, 404)
        assert http.get("/v1/models").status_code == 200
        assert http.get("/health").status_code == 200
