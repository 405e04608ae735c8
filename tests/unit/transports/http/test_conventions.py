"""vLLM's HTTP conventions: JSON-only POST bodies, and the dialect that words the kernel's
own errors in the OpenAI envelope."""

from __future__ import annotations

import json

import pytest

from vllm_sim.http import wire
from vllm_sim.http.messages import Dialect
from vllm_sim.transports.http.conventions import NOT_JSON, OPENAI_DIALECT, require_json


@pytest.mark.parametrize(
    "content_type", [b"application/json", b"Application/JSON", b"application/json; charset=x"]
)
def test_json_with_any_case_and_parameters_is_accepted(content_type: bytes) -> None:
    assert require_json(content_type) is None


@pytest.mark.parametrize("content_type", [None, b"text/plain", b" application/json", b"json"])
def test_anything_else_is_refused_before_the_body_is_read(content_type: bytes | None) -> None:
    error = require_json(content_type)
    assert error is not None and error.status == 400 and NOT_JSON in error.message


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
