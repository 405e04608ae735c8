"""The HTTP answers of the routes that are not generation: JSON bodies, and errors in the
OpenAI envelope."""

from __future__ import annotations

from vllm_sim.errors import RequestError
from vllm_sim.frontend.envelope import encode_json, error_body
from vllm_sim.http.messages import JSON, Headers, Response


def error_response(error: RequestError, headers: Headers | None = None) -> Response:
    return Response(error.status, error_body(error), JSON, headers or [])


def json_response(payload: object, status: int = 200, headers: Headers | None = None) -> Response:
    return Response(status, encode_json(payload), JSON, headers or [])
