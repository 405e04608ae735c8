"""uvicorn's httptools protocol, with the limits it lacks on a request's head.

uvicorn keeps every header line a client sends, however many, and waits for the end of a
request's head for as long as the client takes: one connection could hold gigabytes, or
a slot, forever. Here a head over MAX_HEAD_BYTES or MAX_HEADERS is answered 431, and one
not complete after HEAD_TIMEOUT seconds is answered 408; both close the connection.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from vllm_sim.errors import RequestError
from vllm_sim.http.messages import error_body


class _HeadTooLarge(Exception):
    """Raised from a parser callback: httptools stops and uvicorn answers (see below)."""


def _answer(status: int, reason: str, message: str) -> bytes:
    body = error_body(RequestError(status, message))
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    MAX_HEAD_BYTES: ClassVar[int] = 64 * 1024  # request line and headers
    MAX_HEADERS: ClassVar[int] = 256
    HEAD_TIMEOUT: ClassVar[float] = 30.0

    _head_bytes = 0
    _header_count = 0
    _head_too_large = False
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a head is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._header_count = 0
        self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._count(len(url), 0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value), 1)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a parser error, which a head over the limits raises."""
        if not self._head_too_large:
            super().send_400_response(msg)
            return
        message = (
            f"The request head is over {self.MAX_HEAD_BYTES} bytes or {self.MAX_HEADERS} "
            "header lines"
        )
        self.transport.write(_answer(431, "Request Header Fields Too Large", message))
        self.transport.close()

    def _count(self, size: int, headers: int) -> None:
        self._head_bytes += size
        self._header_count += headers
        if self._head_bytes > self.MAX_HEAD_BYTES or self._header_count > self.MAX_HEADERS:
            self._head_too_large = True
            raise _HeadTooLarge

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.HEAD_TIMEOUT, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        message = f"The request head did not arrive within {self.HEAD_TIMEOUT:g} seconds"
        self.transport.write(_answer(408, "Request Timeout", message))
        self.transport.close()
