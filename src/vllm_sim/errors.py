"""Errors that cross layers. This module imports nothing, so every layer may raise them."""

from __future__ import annotations

_TYPE_BY_STATUS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    431: "RequestHeaderFieldsTooLargeError",
}


def error_type_for(status: int) -> str:
    """The OpenAI SDK class name a status maps to (vLLM uses the same names)."""
    if status >= 500:
        return "InternalServerError"
    return _TYPE_BY_STATUS.get(status, "APIConnectionError")


class RequestError(Exception):
    """A request answered with an HTTP status and an error body naming the offending field."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        error_type: str | None = None,
    ) -> None:
        if not message.isascii():
            # A lone surrogate from a client's text must not make the error unencodable.
            message = message.encode("utf-8", "replace").decode("utf-8")
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.error_type = error_type or error_type_for(status)
