"""--api-key / VLLM_API_KEY / --admin-api-key: what they protect, what stays open, and the
401 each API answers with (OpenAI's shape, or Anthropic's under /v1/messages)."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.support.errors import assert_anthropic_error, assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.server import SimServer

KEYS = ("key-one", "key-two")
keyed = server_fixture(
    ["--api-key", KEYS[0], "--api-key", KEYS[1], "--max-request-body-size-mb", "1"]
)
client = http_fixture("keyed")
from_env = server_fixture(env={"VLLM_API_KEY": "env-key"})
flag_and_env = server_fixture(["--api-key", "flag-key"], env={"VLLM_API_KEY": "env-key"})
admin_keyed = server_fixture(["--api-key", "user-key", "--admin-api-key", "admin-key"])

USER = [{"role": "user", "content": "Hello"}]
MESSAGE_BODY = {"model": "test-model", "max_tokens": 3, "messages": USER}

# Every route a key protects, with a body it would accept.
PROTECTED: list[tuple[str, str, object]] = [
    ("POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 2}),
    ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
    ("POST", "/v1/responses", {"input": "Hi", "max_output_tokens": 2}),
    ("POST", "/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}),
    ("POST", "/v1/embeddings", {"input": "Hi"}),
    ("POST", "/tokenize", {"prompt": "Hi"}),
    ("POST", "/detokenize", {"tokens": [1, 2]}),
    ("POST", "/v1/completions/render", {"prompt": "Hi"}),
    ("POST", "/v1/chat/completions/render", {"messages": USER}),
    ("GET", "/v1/models", None),
    ("GET", "/admin/config", None),
    ("POST", "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/a"}),
    ("POST", "/invocations", {"messages": USER, "max_tokens": 2}),
]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def call(
    client: httpx.Client, method: str, path: str, body: object, **headers: str
) -> httpx.Response:
    return client.request(method, path, json=body, headers=headers)


def oai(sim: SimServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_url, api_key=key, max_retries=0)


def claude(sim: SimServer, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url, api_key=key, max_retries=0)


# ------------------------------------------------------------------ the SDKs


@pytest.mark.parametrize("key", KEYS)
def test_openai_sdk_with_an_accepted_key(keyed: SimServer, key: str) -> None:
    with oai(keyed, key) as sdk:
        reply = sdk.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
        assert reply.choices[0].message.content
        assert [m.id for m in sdk.models.list()] == ["test-model"]


def test_openai_sdk_with_a_wrong_key(keyed: SimServer) -> None:
    with oai(keyed, "key-three") as sdk, pytest.raises(openai.AuthenticationError) as caught:
        sdk.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
    assert caught.value.status_code == 401


@pytest.mark.parametrize("key", KEYS)
def test_anthropic_sdk_with_an_accepted_key(keyed: SimServer, key: str) -> None:
    with claude(keyed, key) as sdk:
        reply = sdk.messages.create(
            model="test-model", max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
        )
        assert reply.content


def test_anthropic_sdk_with_a_wrong_key(keyed: SimServer) -> None:
    with claude(keyed, "key-three") as sdk, pytest.raises(anthropic.AuthenticationError) as caught:
        sdk.messages.create(
            model="test-model", max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
        )
    assert caught.value.status_code == 401
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error", body
    assert body["error"]["type"] == "authentication_error", body


# ------------------------------------------------------------------ raw HTTP


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
def test_every_api_route_needs_a_key(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    assert_openai_error(call(client, method, path, body), 401, error_type="AuthenticationError")
    wrong = call(client, method, path, body, **bearer("nope"))
    assert_openai_error(wrong, 401, error_type="AuthenticationError", param=None)
    right = call(client, method, path, body, **bearer(KEYS[1]))
    assert right.status_code == 200, (path, right.text)


@pytest.mark.parametrize(
    "authorization",
    ["key-one", "Basic key-one", "Bearer", "Bearer key-on", "Bearer key-one2", "Bearer KEY-ONE"],
)
def test_malformed_or_near_miss_credentials_are_refused(
    client: httpx.Client, authorization: str
) -> None:
    response = client.get("/v1/models", headers={"Authorization": authorization})
    assert_openai_error(response, 401)


def test_bearer_scheme_is_case_insensitive(client: httpx.Client) -> None:
    assert client.get("/v1/models", headers={"Authorization": "bearer key-one"}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_messages_take_x_api_key_or_bearer(client: httpx.Client, path: str) -> None:
    for headers in ({"x-api-key": KEYS[0]}, bearer(KEYS[1])):
        assert client.post(path, json=MESSAGE_BODY, headers=headers).status_code == 200
    for headers in ({}, {"x-api-key": "nope"}, bearer("nope")):
        response = client.post(path, json=MESSAGE_BODY, headers=headers)
        assert_anthropic_error(response, 401, error_type="authentication_error")


def test_stored_responses_need_a_key(client: httpx.Client) -> None:
    for method, path in (("GET", "/v1/responses/resp_1"), ("POST", "/v1/responses/resp_1/cancel")):
        assert_openai_error(call(client, method, path, None), 401)
        keyed = call(client, method, path, None, **bearer(KEYS[0]))
        assert_openai_error(keyed, 404, error_type="invalid_request_error", param="response_id")


def test_x_api_key_is_only_for_messages(client: httpx.Client) -> None:
    response = client.get("/v1/models", headers={"x-api-key": KEYS[0]})
    assert_openai_error(response, 401)


@pytest.mark.parametrize(
    "path", ["/health", "/health/ready", "/metrics", "/ping", "/version", "/load"]
)
def test_probes_and_metrics_stay_open(client: httpx.Client, path: str) -> None:
    assert client.get(path).status_code == 200


def test_the_key_is_checked_before_the_body_is_read(client: httpx.Client) -> None:
    """An unauthenticated client cannot make the server read (or size-check) its body."""
    huge = b"{" + b" " * (2 * 1024 * 1024) + b"}"
    response = client.post(
        "/v1/chat/completions", content=huge, headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 401)
    assert client.get("/v1/models", headers=bearer(KEYS[0])).status_code == 200


def test_a_key_in_the_query_string_is_not_a_credential(client: httpx.Client) -> None:
    assert_openai_error(client.get("/v1/models", params={"api_key": KEYS[0]}), 401)


def test_keys_are_not_shown_by_admin_config(client: httpx.Client) -> None:
    config = client.get("/admin/config", headers=bearer(KEYS[0]))
    assert config.status_code == 200
    assert KEYS[0] not in config.text and KEYS[1] not in config.text


# ------------------------------------------------------------------ VLLM_API_KEY


def test_vllm_api_key_from_the_environment(from_env: SimServer) -> None:
    with httpx.Client(base_url=from_env.url, timeout=30) as http:
        assert_openai_error(http.get("/v1/models"), 401)
        assert http.get("/v1/models", headers=bearer("env-key")).status_code == 200
        assert http.get("/health").status_code == 200
    with oai(from_env, "env-key") as sdk:
        assert [m.id for m in sdk.models.list()] == ["test-model"]


def test_the_flag_beats_the_environment(flag_and_env: SimServer) -> None:
    with httpx.Client(base_url=flag_and_env.url, timeout=30) as http:
        assert_openai_error(http.get("/v1/models", headers=bearer("env-key")), 401)
        assert http.get("/v1/models", headers=bearer("flag-key")).status_code == 200


# ------------------------------------------------------------------ --admin-api-key


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/admin/config", None),
        ("POST", "/admin/config", {}),
        ("POST", "/fake_metrics", {"running-requests": 1}),
        ("POST", "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/a"}),
        ("POST", "/v1/unload_lora_adapter", {"lora_name": "a"}),
    ],
)
def test_control_routes_take_the_admin_key_only(
    admin_keyed: SimServer, method: str, path: str, body: object
) -> None:
    with httpx.Client(base_url=admin_keyed.url, timeout=30) as http:
        for key in (None, "user-key", "nope"):
            headers = bearer(key) if key else {}
            assert_openai_error(call(http, method, path, body, **headers), 401)
        admitted = call(http, method, path, body, **bearer("admin-key"))
        assert admitted.status_code != 401, admitted.text


def test_the_admin_key_opens_nothing_else(admin_keyed: SimServer) -> None:
    with httpx.Client(base_url=admin_keyed.url, timeout=30) as http:
        assert_openai_error(http.get("/v1/models", headers=bearer("admin-key")), 401)
        assert http.get("/v1/models", headers=bearer("user-key")).status_code == 200
