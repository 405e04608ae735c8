"""The OpenAI error envelope vLLM answers in, and the JSON encoding of every answer body."""

from __future__ import annotations

import msgspec

from vllm_sim.errors import RequestError


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
