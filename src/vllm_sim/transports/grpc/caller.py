"""A gRPC call as the pipeline reads a caller: its metadata as the header fields, the
request id the message carries as X-Request-Id."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from vllm_sim.frontend.caller import Headers

# A call's context; the servicer reads its metadata and ends it with a status.
Context = grpc.aio.ServicerContext[Any, Any]


class GrpcCaller:
    """One call's sender. A cancelled call ends its handler, which aborts the request
    itself, so nothing watches for a disconnect."""

    __slots__ = ("_fields", "headers", "received", "request_id")

    def __init__(self, context: Context, request_id: str = "") -> None:
        self.received = time.monotonic()
        self.request_id: str | None = None
        self.headers = metadata_headers(context)
        if request_id:
            self.headers.append((b"x-request-id", request_id.encode()))
        self._fields = dict(reversed(self.headers))  # the first value of a name wins

    def header(self, name: bytes) -> str | None:
        value = self._fields.get(name)
        return None if value is None else value.decode("latin-1")

    def on_disconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        return _nothing


def _nothing() -> None:
    return None


def metadata_headers(context: Context) -> Headers:
    """The call's metadata as header fields (lower-case names, as gRPC sends them); binary
    entries are left out."""
    headers: Headers = []
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            headers.append((key.encode(), value.encode("latin-1", "replace")))
    return headers
