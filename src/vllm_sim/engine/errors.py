"""Why the engine refuses or fails a request, in its own terms: the API maps each refusal to
the status and envelope of the protocol the request came in on."""

from __future__ import annotations

import enum


class Refusal(enum.Enum):
    INVALID = "invalid"  # the request cannot be served as asked (context, schema, cache size)
    QUEUE_FULL = "queue_full"  # no room to wait: the caller should retry later
    SLEEPING = "sleeping"  # the model is asleep until woken
    STOPPING = "stopping"  # the server stops before the request could finish
    INTERNAL = "internal"  # a bug cost this request


class RequestAborted(Exception):
    """The client went away; whatever the request held has been given back."""


class EngineError(Exception):
    """A request the engine refused at submission, or that failed after it was admitted."""

    def __init__(self, refusal: Refusal, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message
        self.param = param
