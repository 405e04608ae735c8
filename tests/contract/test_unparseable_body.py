"""A body that is not JSON, or JSON that is not an object, is a 400 parse error in the OpenAI
envelope on every OpenAI-shaped endpoint (Responses and Messages: test_malformed_*)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.http import CHAT, COMPLETIONS, EMBEDDINGS, PARSE_PREFIX

NOT_JSON = [b"{bad", b"", b"{", b'{"messages": [}', b"not json", b'{"prompt": "a",}', b"\xff\xfe"]
NOT_AN_OBJECT = [b"[]", b"null", b"42", b'"text"', b"true"]
EMBEDDINGS_BODIES = [b"", b"{", b"[]", b'"input"', b"not json", b"\xff\xfe"]

CASES = [
    *[(path, raw) for raw in NOT_JSON for path in (CHAT, COMPLETIONS)],
    *[(path, raw) for raw in NOT_AN_OBJECT for path in (CHAT, COMPLETIONS)],
    *[(EMBEDDINGS, raw) for raw in EMBEDDINGS_BODIES],
]


@pytest.mark.parametrize(("path", "raw"), CASES)
def test_unparseable_body_is_400_parse_error(http: httpx.Client, path: str, raw: bytes) -> None:
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert_openai_error(response, 400, param=None, prefix=PARSE_PREFIX)
