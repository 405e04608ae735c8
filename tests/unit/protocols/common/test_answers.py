"""The JSON answers of the routes that are not generation."""

from __future__ import annotations

import json

from vllm_sim.errors import RequestError
from vllm_sim.protocols.common.answers import error_response, json_response


def test_an_error_answer_is_the_envelope_with_its_status() -> None:
    response = error_response(RequestError(429, "slow down"))
    assert response.status == 429 and response.content_type == b"application/json"
    assert json.loads(response.body)["error"]["type"] == "RateLimitError"


def test_a_json_answer_carries_its_status_and_headers() -> None:
    response = json_response({"a": 1}, 201, [(b"x", b"y")])
    assert (response.status, json.loads(response.body)) == (201, {"a": 1})
    assert response.headers == [(b"x", b"y")]
