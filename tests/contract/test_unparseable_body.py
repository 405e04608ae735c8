"""A body that is not JSON, or JSON that is not an object, is a 400 in the OpenAI envelope
on every OpenAI-shaped endpoint (Responses and Messages: test_malformed_*), worded as vLLM
0.32 words it: FastAPI's validation error, located in the body."""

from __future__ import annotations

import httpx
import pytest

from tests.support.errors import VALIDATION_TYPE, assert_openai_error
from tests.support.http import CHAT, COMPLETIONS, EMBEDDINGS, VALIDATION_PREFIX

# raw body: (pydantic's error type, param)
NOT_JSON = {
    b"{bad": ("json_invalid", "body.1"),
    b"": ("missing", "body"),  # FastAPI reads an empty body as none
    b"{": ("json_invalid", "body.1"),
    b'{"messages": [}': ("json_invalid", "body.14"),
    b"not json": ("json_invalid", "body.0"),
    b'{"prompt": "a",}': ("json_invalid", "body.15"),
    b"\xff\xfe": ("json_invalid", "body.0"),  # a UTF-16 byte order mark, then nothing
}
NOT_AN_OBJECT = {
    b"[]": ("model_attributes_type", "body"),
    b"null": ("missing", "body"),
    b"42": ("model_attributes_type", "body"),
    b'"text"': ("model_attributes_type", "body"),
    b"true": ("model_attributes_type", "body"),
    b'"input"': ("model_attributes_type", "body"),
}
EMBEDDINGS_BODIES = [b"", b"{", b"[]", b'"input"', b"not json", b"\xff\xfe"]
EVERY = {**NOT_JSON, **NOT_AN_OBJECT}

CASES = [
    *[(path, raw) for raw in EVERY for path in (CHAT, COMPLETIONS)],
    *[(EMBEDDINGS, raw) for raw in EMBEDDINGS_BODIES],
]


@pytest.mark.parametrize(("path", "raw"), CASES)
def test_unparseable_body_is_vllms_validation_error(
    http: httpx.Client, path: str, raw: bytes
) -> None:
    kind, param = EVERY[raw]
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    error = assert_openai_error(
        response, 400, error_type=VALIDATION_TYPE, param=param, prefix=VALIDATION_PREFIX
    )
    assert error["message"].startswith(f"{VALIDATION_PREFIX}{{'type': '{kind}', ")


def test_bytes_that_are_no_text(http: httpx.Client) -> None:
    response = http.post(
        CHAT, content=b'{"model": "\xff"}', headers={"content-type": "application/json"}
    )
    message = "There was an error parsing the body"  # FastAPI's own answer
    assert_openai_error(response, 400, message, error_type=VALIDATION_TYPE, param=None)
