"""One request on a connection, from its head to the end of its answer: the Exchange the
application answers through, and the framing of that answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from vllm_sim.http import wire
from vllm_sim.http.messages import BodyTooLarge, Headers, Response, StreamingResponse

log = logging.getLogger("vllm_sim.http")

_NO_CACHE = b"cache-control: no-cache\r\n"
# A complete answer's head and body go out in one write up to this size; a larger body is
# handed over as is, beside its head, rather than copied into one buffer with it.
_JOIN_LIMIT = 16 * 1024


class ClientGone(Exception):
    """The connection closed while its request's body was still being read."""


class Link(Protocol):
    """The connection a request came on, as its exchange writes to it."""

    open: bool
    port: int
    loop: asyncio.AbstractEventLoop

    def date(self) -> bytes: ...

    def write(self, data: bytes) -> None: ...

    def write_all(self, pieces: tuple[bytes, ...]) -> None: ...

    def write_chunk(self, data: bytes) -> Awaitable[None]: ...

    def write_plain(self, data: bytes) -> Awaitable[None]: ...

    def write_discarding(self, data: bytes) -> Awaitable[None]: ...

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]: ...


class Cycle:
    """One request on a connection, from its head to the end of its answer: the Exchange
    the application answers through."""

    __slots__ = (
        "_body",
        "_conn",
        "_waiter",
        "close_after",
        "complete",
        "expects_continue",
        "headers",
        "method",
        "overflow",
        "path",
        "port",
        "query",
        "received",
        "responded",
        "size",
        "status",
        "version",
    )

    def __init__(self, conn: Link, received: float) -> None:
        self._conn = conn
        self.received = received
        self.method = ""
        self.path = ""
        self.query = b""
        self.headers: Headers = []
        self.port = conn.port
        self.version = "1.1"
        self._body: list[bytes] = []
        self.size = 0
        self.complete = False  # the whole body has arrived
        self.overflow = False  # the body passed the limit: the rest is dropped
        self.expects_continue = False
        self.close_after = False
        self.responded = False  # an answer's head has been written
        self.status = 0
        self._waiter: asyncio.Future[None] | None = None

    # -- filled in by the connection --

    def add_body(self, data: bytes, limit: int) -> None:
        if self.overflow or self.responded:
            return
        self.size += len(data)
        if self.size > limit:
            self.overflow = True
            self._body.clear()
            self.wake()  # a handler waiting for the body answers 413 now
        else:
            self._body.append(data)

    def body_arrived(self) -> None:
        self.complete = True
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the Exchange --

    async def read_body(self) -> bytes:
        while not self.complete and not self.overflow:
            conn = self._conn
            if not conn.open:
                raise ClientGone
            if self.expects_continue:
                self.expects_continue = False
                conn.write(wire.CONTINUE)
            self._waiter = conn.loop.create_future()
            await self._waiter
        if self.overflow:
            raise BodyTooLarge
        body = self._body
        return body[0] if len(body) == 1 else b"".join(body)

    def on_disconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._conn.watch(callback)

    def respond(self, response: Response, extra: Headers) -> int:
        body = response.body
        size = len(body)
        conn = self._conn
        framing = wire.content_length(size)
        if response.content_type:
            framing += b"content-type: " + response.content_type + wire.CRLF
        self._begin(response.status, response.headers)
        close = self.close_after and not _names_connection(response.headers)
        head = self._head(response.status, response.headers, extra, framing, close)
        if self.method == "HEAD":
            conn.write(head)
        elif size <= _JOIN_LIMIT:
            conn.write(head + body)
        else:
            conn.write_all((head, body))
        return size

    async def stream(self, response: StreamingResponse, extra: Headers) -> None:
        conn = self._conn
        self._begin(response.status, response.headers)
        # HTTP/1.0 knows no chunked framing: the body is sent as is and ends with the
        # connection.
        chunked = self.version != "1.0"
        if not chunked:
            self.close_after = True
        framing = b"content-type: " + response.content_type + wire.CRLF + _NO_CACHE
        if chunked:
            framing += wire.CHUNKED
        conn.write(self._head(response.status, response.headers, extra, framing, self.close_after))
        if self.method == "HEAD":
            write = conn.write_discarding
        else:
            write = conn.write_chunk if chunked else conn.write_plain
        try:
            await response.produce(write)
        except Exception:
            log.exception("stream failed")
        if self.method != "HEAD" and chunked:
            conn.write(wire.LAST_CHUNK)

    def _head(
        self, status: int, headers: Headers, extra: Headers, framing: bytes, close: bool
    ) -> bytes:
        return wire.head(status, self._conn.date(), headers, extra, framing, close)

    def _begin(self, status: int, headers: Headers) -> None:
        if self.responded:
            raise RuntimeError("a request was answered twice")
        self.responded = True
        self.status = status
        # An answer that says it closes the connection (a 413) does, and so does one given
        # before its request's body was all read: the rest of it cannot be told from the
        # next request.
        if not self.complete or _names_connection(headers):
            self.close_after = True


def _names_connection(headers: Headers) -> bool:
    return any(name == b"connection" for name, _ in headers)
