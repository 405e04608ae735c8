"""The one check of each error envelope the simulator answers with.

OpenAI shape (every endpoint but /v1/messages): `{"error": {message, type, param, code}}`.
Anthropic shape (/v1/messages): `{"type": "error", "error": {type, message}}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

# The OpenAI error type of each status the SDK maps to its own exception.
ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}

# Real Anthropic error types by status (the SDK picks its exception from the status).
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}

# vLLM 0.32's refusal of a body its schema rejects (FastAPI's validation error): the HTTP
# phrase as type, one entry under a count, `param` the location (`body.n`).
VALIDATION_TYPE = "Bad Request"
VALIDATION_PREFIX = "1 validation error:\n  "

UNSET: Any = object()  # "do not check this field"


class Answer(Protocol):
    """What the checks read of an answer: an httpx.Response, or a recorded async Outcome."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


def assert_openai_error(
    response: Answer,
    status: int | None = None,
    message: str | None = None,
    *,
    error_type: str | None = None,
    param: object = UNSET,
    prefix: str | None = None,
    contains: str | None = None,
) -> dict[str, Any]:
    """Checks the OpenAI error envelope {"error": {message, type, param, code}}; returns `error`.

    `status=None` accepts any 4xx. The type is `error_type` when given, else the one the
    status implies (ERROR_TYPES, InternalServerError for 5xx; with `status=None`, a 400 may
    also be VALIDATION_TYPE). `param` is checked when given.
    """
    any_status = status is None
    if status is None:
        assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
        status = response.status_code
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert error["code"] == status and type(error["code"]) is int
    assert error["param"] is None or isinstance(error["param"], str)
    if error_type is not None:
        assert error["type"] == error_type, error
    elif any_status and status == 400 and error["type"] == VALIDATION_TYPE:
        pass  # a 400 of either kind: vLLM's validation error or another refusal
    elif status in ERROR_TYPES:
        assert error["type"] == ERROR_TYPES[status], error
    elif status >= 500:
        assert error["type"] == "InternalServerError", error
    if message is not None:
        assert error["message"] == message, error
    if prefix is not None:
        assert error["message"].startswith(prefix), error
    if contains is not None:
        assert contains in error["message"], error
    if param is not UNSET:
        assert error["param"] == param, error
    return error


def assert_validation_error(
    response: Answer, param: str | None, kind: str | None = None
) -> dict[str, Any]:
    """vLLM's validation error in the OpenAI envelope; `kind` is pydantic's error type."""
    error = assert_openai_error(
        response, 400, error_type=VALIDATION_TYPE, param=param, prefix=VALIDATION_PREFIX
    )
    if kind is not None:
        assert error["message"].startswith(f"{VALIDATION_PREFIX}{{'type': '{kind}', "), error
    return error


def assert_anthropic_error(
    response: Answer,
    status: int,
    message: str | None = None,
    *,
    contains: str | None = None,
    error_type: str | None = None,
) -> dict[str, Any]:
    """Anthropic's error envelope, exactly: {"type":"error","error":{"type","message"}}."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"type", "message"}, error
    assert isinstance(error["message"], str) and error["message"], error
    expected = error_type or ANTHROPIC_ERROR_TYPES.get(status)
    if expected is None:
        expected = "api_error" if status >= 500 else "invalid_request_error"
    assert error["type"] == expected, error
    if message is not None:
        assert error["message"] == message, error
    if contains is not None:
        assert contains in error["message"], error
    return error


def context_length_message(max_model_len: int, max_tokens: int | None) -> str:
    """vLLM's refusal of a prompt that leaves too little room for max_tokens (or for one
    token, when unset). vLLM counts the prompt only until it overflows, so the message
    gives the least prompt that does not fit, whatever the real prompt's length."""
    asked = max_tokens or 0
    counted = max_model_len - asked + 1
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, you "
        f"requested {asked} output tokens and your prompt contains at least {counted} input "
        f"tokens, for a total of at least {max_model_len + 1} tokens. Please reduce the "
        "length of the input prompt or the number of requested output tokens. "
        f"(parameter=input_tokens, value={counted})"
    )


def max_tokens_message(max_model_len: int, max_tokens: int) -> str:
    """vLLM's refusal of a max_tokens larger than the whole context."""
    return (
        f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. "
        f"Please request fewer output tokens. (parameter=max_tokens, value={max_tokens})"
    )


def unknown_model_message(model: str, *served: str) -> str:
    """vLLM 0.32's 404 for a model it does not serve, which lists the served names (adapters
    not among them) in their flag order."""
    return f"The model `{model}` does not exist. Valid aliases: {', '.join(served)}."


def prompt_too_long_message(max_model_len: int) -> str:
    """vLLM 0.32's refusal of a prompt that alone overflows the context: it counts the
    prompt only until it overflows, so the message names one token more than fits."""
    counted = max_model_len + 1
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, your "
        f"prompt contains at least {counted} input tokens, which exceeds this limit even "
        "without any output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={counted})"
    )


def too_many_logprobs_message(asked: int) -> str:
    """vLLM 0.32's refusal of more than 20 top logprobs (the chat `top_logprobs` and the
    completions `logprobs` alike, both named `logprobs`)."""
    return (
        f"Requested sample logprobs of {asked}, which is greater than max allowed: 20 "
        f"(parameter=logprobs, value={asked})"
    )
