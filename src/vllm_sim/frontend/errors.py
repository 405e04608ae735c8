"""How an engine refusal reads as a request's error: one status per refusal, on every
endpoint and transport (gRPC maps the status to its own code)."""

from __future__ import annotations

from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.errors import RequestError

_STATUS = {
    Refusal.INVALID: 400,
    Refusal.QUEUE_FULL: 429,
    Refusal.SLEEPING: 503,
    Refusal.STOPPING: 503,
    Refusal.INTERNAL: 500,
}


def refusal_error(error: EngineError) -> RequestError:
    return RequestError(_STATUS[error.refusal], error.message, error.param)


def as_request_error(error: BaseException) -> RequestError:
    """A failure as an error to answer with; anything unexpected is a 500."""
    if isinstance(error, RequestError):
        return error
    if isinstance(error, EngineError):
        return refusal_error(error)
    return RequestError(500, str(error))
