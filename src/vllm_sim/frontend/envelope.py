"""The OpenAI error envelope vLLM answers in, and the JSON encoding of every answer body."""

from __future__ import annotations

import msgspec

from vllm_sim.errors import RequestError
from vllm_sim.http.messages import JSON, Dialect, Headers, Response


class ErrorInfo(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: int


class ErrorBody(msgspec.Struct):
    error: ErrorInfo


_encoder = msgspec.json.Encoder()
# Shared by the loop and the answer thread: an encode holds the GIL from start to end (no
# hooks call back into Python), so one encoder is never entered twice at once.
encode_json = _encoder.encode


def error_body(error: RequestError) -> bytes:
    """The OpenAI error shape vLLM uses: {"error": {message, type, param, code}}."""
    info = ErrorInfo(error.message, error.error_type, error.param, error.status)
    return _encoder.encode(ErrorBody(info))


def error_response(error: RequestError, headers: Headers | None = None) -> Response:
    return Response(error.status, error_body(error), JSON, headers or [])


def json_response(payload: object, status: int = 200, headers: Headers | None = None) -> Response:
    return Response(status, _encoder.encode(payload), JSON, headers or [])


def _too_large(limit: int) -> str:
    limit_mb = limit // (1024 * 1024)
    return f"Request body exceeds the {limit_mb} MB limit (max-request-body-size-mb)"


# The kernel's own errors (404, 405, 408, 413, 431, 500...) in the envelope of the API.
OPENAI_DIALECT = Dialect(error_body, JSON, _too_large)
