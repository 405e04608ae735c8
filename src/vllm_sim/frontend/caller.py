"""Who sent a request, in the terms the pipeline reads whatever carried it.

The pipeline never sees a transport: HTTP hands it the parsed request, gRPC an adapter over
the call's metadata. Both give the same facts: named header fields (HTTP headers, gRPC
metadata, names in lower case), when the request arrived, its id once named, and a way to
learn that the caller has gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

# Name and value pairs, names in lower case: HTTP headers, or a gRPC call's metadata.
Headers = list[tuple[bytes, bytes]]


class Caller(Protocol):
    """One request's sender."""

    received: float  # time.monotonic() when its first byte arrived: latencies count from it
    request_id: str | None  # set once the pipeline names the request

    def header(self, name: bytes) -> str | None:
        """The value of a header or metadata entry (name in lower case), or None."""
        ...

    def on_disconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls `callback` if the caller goes away (at once if it has); returns the
        function that stops watching."""
        ...
