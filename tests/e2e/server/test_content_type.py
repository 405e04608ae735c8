"""Every route that reads a JSON body refuses another media type, a missing one included,
as vLLM 0.32 does (400, its validation wording); a charset parameter or another case is
fine. The control routes keep their own rule (415; no Content-Type is allowed)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_anthropic_error
from tests.support.http import CHAT, COMPLETIONS, EMBEDDINGS, chat_body
from tests.support.native import GENERATE, gen_body

USER = [{"role": "user", "content": "Hi"}]
# Each OpenAI-shaped JSON route with a body it accepts.
ROUTES: dict[str, dict[str, Any]] = {
    CHAT: chat_body(max_tokens=2),
    COMPLETIONS: {"prompt": "Hi", "max_tokens": 2},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 2},
    GENERATE: gen_body([1, 2, 3], 2),
    EMBEDDINGS: {"input": "Hi"},
    "/v1/completions/render": {"prompt": "Hi"},
    "/v1/chat/completions/render": {"messages": USER},
    "/tokenize": {"prompt": "Hi"},
    "/detokenize": {"tokens": [1, 2]},
}
MESSAGES_BODY = {"messages": USER, "max_tokens": 2}
# vLLM 0.32's answer, byte for byte.
REFUSAL = (
    b'{"error":{"message":"1 validation error:\\n  Unsupported Media Type: Only '
    b'\'application/json\' is allowed","type":"Bad Request","param":null,"code":400}}'
)
REFUSED = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json-patch+json",
    "application/jsonx",
    "application/json ; charset=utf-8",  # vLLM compares up to the `;`, blanks included
    "",
]
ACCEPTED = ["application/json", "application/json; charset=utf-8", "Application/JSON"]


def send(http: httpx.Client, path: str, body: object, content_type: str | None) -> httpx.Response:
    headers = {} if content_type is None else {"content-type": content_type}
    return http.post(path, content=json.dumps(body), headers=headers)


@pytest.mark.parametrize("content_type", [*REFUSED, None])
@pytest.mark.parametrize("path", sorted(ROUTES))
def test_another_media_type_is_refused(
    http: httpx.Client, path: str, content_type: str | None
) -> None:
    response = send(http, path, ROUTES[path], content_type)
    assert (response.status_code, response.content) == (400, REFUSAL), content_type
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize("content_type", ACCEPTED)
@pytest.mark.parametrize("path", sorted(ROUTES))
def test_json_with_parameters_or_another_case_is_read(
    http: httpx.Client, path: str, content_type: str
) -> None:
    response = send(http, path, ROUTES[path], content_type)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("content_type", ["text/plain", None])
def test_messages_refuses_it_in_anthropics_envelope(
    http: httpx.Client, content_type: str | None
) -> None:
    response = send(http, "/v1/messages", MESSAGES_BODY, content_type)
    message = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
    assert_anthropic_error(response, 400, message)
    assert send(http, "/v1/messages", MESSAGES_BODY, "application/json").status_code == 200


def test_the_media_type_is_checked_before_the_body(http: httpx.Client) -> None:
    response = http.post(CHAT, content=b"{not json", headers={"content-type": "text/plain"})
    assert response.content == REFUSAL


def test_control_routes_keep_their_own_rule(http: httpx.Client) -> None:
    body = {"lora_name": "ct-check"}
    refused = send(http, "/v1/unload_lora_adapter", body, "text/plain")
    assert refused.status_code == 415
    unknown = send(http, "/v1/unload_lora_adapter", body, None)  # no type: read as JSON
    assert unknown.status_code == 404, unknown.text
