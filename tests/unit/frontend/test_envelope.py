"""The OpenAI error envelope, and the dialect that words the kernel's own errors in it."""

from __future__ import annotations

import json

from vllm_sim.errors import RequestError
from vllm_sim.frontend.envelope import OPENAI_DIALECT, error_body, error_response
from vllm_sim.http import wire
from vllm_sim.http.messages import Dialect


def test_the_envelope_names_message_type_param_and_code() -> None:
    body = json.loads(error_body(RequestError(404, "gone", "model")))
    assert body == {
        "error": {"message": "gone", "type": "NotFoundError", "param": "model", "code": 404}
    }
    response = error_response(RequestError(429, "slow down"))
    assert response.status == 429 and response.content_type == b"application/json"


def test_the_kernels_protocol_errors_take_the_dialects_words() -> None:
    answer = wire.protocol_error(431, "too big", b"", OPENAI_DIALECT)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head
    assert json.loads(body)["error"]["type"] == "RequestHeaderFieldsTooLargeError"
    plain = wire.protocol_error(431, "too big", b"", Dialect())
    assert plain.endswith(b"\r\n\r\ntoo big") and b"text/plain" in plain


def test_a_body_over_the_limit_is_worded_in_megabytes_and_names_the_flag() -> None:
    assert OPENAI_DIALECT.too_large(3 * 1024 * 1024) == (
        "Request body exceeds the 3 MB limit (max-request-body-size-mb)"
    )
