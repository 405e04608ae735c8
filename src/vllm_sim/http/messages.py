"""One HTTP exchange: a parsed request and the response kinds."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol, cast

from vllm_sim.errors import RequestError

Headers = list[tuple[bytes, bytes]]
# Each header name (lower case) once, with its first value.
Fields = dict[bytes, bytes]


def header_fields(headers: Headers) -> Fields:
    """One lookup table for all the header reads of a request, built in C (the first value
    of a repeated name wins, as a single-valued read of the headers does)."""
    return dict(reversed(headers))


def declared_length(fields: Fields) -> int:
    """A request's Content-Length, 0 without one (the parser has refused a malformed one)."""
    length = fields.get(b"content-length")
    return int(length) if length is not None and length.isdigit() else 0


BodyWriter = Callable[[bytes], Awaitable[None]]


class _Ready:
    """An awaitable that is already done: what a body write returns when the transport took
    the bytes and has room for more, so a streamed token costs no future and no task
    switch. A writer that must wait returns something else, to be awaited."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return cast(Generator[Any, None, None], iter(()))


READY: Awaitable[None] = _Ready()
# Registers a callback for the client going away; returns the function that unregisters it.
DisconnectWatch = Callable[[Callable[[], None]], Callable[[], None]]

JSON = b"application/json"


class HttpRequest:
    """A request whose body has been read in full (within the size limit)."""

    __slots__ = (
        "_watch",
        "body",
        "fields",
        "headers",
        "method",
        "path",
        "port",
        "query",
        "received",
        "request_id",
    )

    def __init__(
        self,
        method: str,
        path: str,
        query: bytes,
        headers: Headers,
        body: bytes,
        watch: DisconnectWatch,
        port: int,
        fields: Fields | None = None,
        received: float | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.fields = header_fields(headers) if fields is None else fields
        # When the server began to read it (time.monotonic()): latencies count from the
        # request's arrival, so time spent reading the body and queueing is included.
        self.received = time.monotonic() if received is None else received
        self.body = body
        self.port = port  # the port this request arrived on
        self.request_id: str | None = None  # set once the handler names the request
        self._watch = watch

    def header(self, name: bytes) -> str | None:
        """The value of a header (name in lower case), or None."""
        value = self.fields.get(name)
        return None if value is None else value.decode("latin-1")

    def on_disconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls `callback` if the client goes away (at once if it already has); returns a
        function that stops watching."""
        return self._watch(callback)


# init=False: mypyc compiles a hand-written __init__; the one dataclasses writes stays
# interpreted, and costs several times more for every request that makes one.
@dataclass(slots=True, init=False)
class Response:
    """A complete response body."""

    status: int
    body: bytes
    content_type: bytes
    headers: Headers

    def __init__(
        self,
        status: int,
        body: bytes,
        content_type: bytes = JSON,
        headers: Headers | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = [] if headers is None else headers


@dataclass(slots=True, init=False)  # as Response's
class StreamingResponse:
    """A response whose body is produced piece by piece (server-sent events).

    `produce(write)` awaits `write(chunk)` for each piece and returns when the body is
    complete. Pushing through a writer, rather than pulling from an async generator,
    saves the generator protocol on every token of every stream.
    """

    produce: Callable[[BodyWriter], Awaitable[None]]
    status: int
    content_type: bytes
    headers: Headers

    def __init__(
        self,
        produce: Callable[[BodyWriter], Awaitable[None]],
        status: int = 200,
        content_type: bytes = b"text/event-stream; charset=utf-8",
        headers: Headers | None = None,
    ) -> None:
        self.produce = produce
        self.status = status
        self.content_type = content_type
        self.headers = [] if headers is None else headers


AnyResponse = Response | StreamingResponse
Handler = Callable[[HttpRequest], Awaitable[AnyResponse]]


class BodyTooLarge(Exception):
    """The request body is over the server's limit; what arrived of it was not kept."""


class Exchange(Protocol):
    """One request as the HTTP server hands it to the application, and the way back."""

    method: str
    path: str
    query: bytes
    headers: Headers  # names in lower case, in the order sent
    port: int  # the port it arrived on
    received: float  # time.monotonic() when its first byte was read

    async def read_body(self) -> bytes:
        """The whole body; raises BodyTooLarge past the server's limit."""
        ...

    def on_disconnect(self, callback: Callable[[], None]) -> Callable[[], None]: ...

    def respond(self, response: Response, extra: Headers) -> int:
        """Writes a complete answer (`extra`: more headers); returns its body's size."""
        ...

    async def stream(self, response: StreamingResponse, extra: Headers) -> None:
        """Writes a streamed answer as its producer makes it, chunked."""
        ...


# The body of an error answer: what the application's API wraps an error in.
ErrorRenderer = Callable[[RequestError], bytes]


def plain_error_body(error: RequestError) -> bytes:
    return error.message.encode()


def _too_large(limit: int) -> str:
    return f"Request body exceeds the {limit} byte limit"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How the kernel words the errors it answers itself (404, 405, 408, 413, 431, 500...):
    plain text unless the application brings its API's envelope, so that every error a
    client sees has the one shape it parses."""

    error_body: ErrorRenderer = plain_error_body
    media_type: bytes = b"text/plain; charset=utf-8"
    too_large: Callable[[int], str] = _too_large  # the message of a body over the limit
