"""JSON that Python's reader accepts but JSON does not is a 400 on every JSON route.

A body whose first decode fails on a duplicate key gets a second, last-key-wins look (as
vLLM reads JSON); that look must not let through what the first one would refuse: a lone
surrogate (which cannot be encoded again) or NaN.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.errors import assert_anthropic_error, assert_openai_error

JSON_ROUTES = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/inference/v1/generate",
    "/v1/embeddings",
    "/v1/completions/render",
    "/v1/chat/completions/render",
    "/tokenize",
    "/detokenize",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
]
# The first `model` is not a string, so the first decode fails and the second look runs.
LONE_SURROGATE = b'{"model": 5, "model": "\\ud800"}'
NAN = b'{"model": 5, "model": "m", "max_tokens": 1, "max_tokens": NaN}'
HEADERS = {"content-type": "application/json"}


@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize("body", [LONE_SURROGATE, NAN], ids=["lone-surrogate", "nan"])
def test_duplicate_keys_cannot_smuggle_invalid_json(
    http: httpx.Client, path: str, body: bytes
) -> None:
    assert_openai_error(http.post(path, content=body, headers=HEADERS), 400)


@pytest.mark.parametrize("body", [LONE_SURROGATE, NAN], ids=["lone-surrogate", "nan"])
def test_messages_refuses_them_in_its_own_envelope(http: httpx.Client, body: bytes) -> None:
    assert_anthropic_error(http.post("/v1/messages", content=body, headers=HEADERS), 400)
