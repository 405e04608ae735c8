"""Errors on demand: the X-Return-Error header and random failure injection.

Both run after the body parsed and before the model check, on every generation endpoint
(as the reference orders them), so a test can make any request fail the way a real server would.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from vllm_sim.engine.admission import prompt_too_long
from vllm_sim.errors import RequestError
from vllm_sim.frontend.caller import Caller

RATE_LIMIT = "rate_limit"
INVALID_API_KEY = "invalid_api_key"
CONTEXT_LENGTH = "context_length"
SERVER_ERROR = "server_error"
INVALID_REQUEST = "invalid_request"
MODEL_NOT_FOUND = "model_not_found"
ALL_TYPES = (
    RATE_LIMIT,
    INVALID_API_KEY,
    CONTEXT_LENGTH,
    SERVER_ERROR,
    INVALID_REQUEST,
    MODEL_NOT_FOUND,
)

_ERRORS: dict[str, Callable[[str, int], RequestError]] = {
    RATE_LIMIT: lambda model, _: RequestError(
        429,
        f"Rate limit reached for {model} in organization org-xxx on requests per min (RPM): "
        "Limit 3, Used 3, Requested 1.",
    ),
    INVALID_API_KEY: lambda *_: RequestError(401, "Incorrect API key provided."),
    # vLLM's own refusal of an overlong prompt, naming this server's real context length.
    CONTEXT_LENGTH: lambda _, limit: RequestError(
        400, prompt_too_long(limit), param="input_tokens"
    ),
    SERVER_ERROR: lambda *_: RequestError(503, "The server is overloaded or not ready yet."),
    INVALID_REQUEST: lambda *_: RequestError(
        400, "Invalid request: missing required parameter 'model'.", param="model"
    ),
    MODEL_NOT_FOUND: lambda model, _: RequestError(
        404, f"The model '{model}-nonexistent' does not exist", param="model"
    ),
}

RETURN_ERROR_HEADER = b"x-return-error"


def injected_error(failure_type: str, model: str, max_model_len: int) -> RequestError:
    """The error one failure type answers with; `model` is the base --model value."""
    return _ERRORS[failure_type](model, max_model_len)


def header_error(value: str) -> RequestError:
    """The error X-Return-Error asks for."""
    try:
        status = int(value.strip())
    except ValueError:
        return RequestError(
            400, f'Invalid X-Return-Error header value "{value}": must be an integer'
        )
    if not 100 <= status <= 599:
        # Anything else cannot be sent as an HTTP status line.
        return RequestError(
            400, f'Invalid X-Return-Error header value "{value}": must be between 100 and 599'
        )
    return RequestError(
        status, f"Simulated error triggered by X-Return-Error header (code {status})"
    )


class FailureInjector:
    """Decides, per request, whether it fails before reaching the engine."""

    def __init__(self, model: str, rng: random.Random, max_model_len: int) -> None:
        self._model = model
        self._max_model_len = max_model_len
        self._rng = rng
        self.rate = 0
        self.types: tuple[str, ...] = ALL_TYPES

    def configure(self, rate: int, types: tuple[str, ...]) -> None:
        """Live settings; an empty type list means all six."""
        self.rate = rate
        self.types = types or ALL_TYPES

    def check(self, caller: Caller) -> None:
        """Raises the error this request must get, if any."""
        asked = caller.header(RETURN_ERROR_HEADER)
        if asked:
            raise header_error(asked)
        if self.rate and self._rng.randint(1, 100) <= self.rate:
            kind = self._rng.choice(self.types)
            raise injected_error(kind, self._model, self._max_model_len)
