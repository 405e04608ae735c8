"""HTTP/1.1 framing: status lines, response heads, chunked body pieces, the Date header.

Everything a response head is made of that does not change per request is built once:
the status lines, and the Date value, which changes once a second.
"""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus

from vllm_sim.errors import RequestError
from vllm_sim.http.messages import Dialect, Headers

CRLF = b"\r\n"
# The end of a chunked body: the zero-size chunk, and no trailers.
LAST_CHUNK = b"0\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


_STATUS_LINES = {int(status): _status_line(int(status)) for status in HTTPStatus}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else _status_line(status)


class DateHeader:
    """The `date: ...` header line, formatted at most once a second."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._line = b"date: " + formatdate(now, usegmt=True).encode() + CRLF
        return self._line


def head(
    status: int,
    date: bytes,
    headers: Headers,
    extra: Headers,
    framing: bytes,
    close: bool,
) -> bytes:
    """A response head. `framing` is the content-length or transfer-encoding line."""
    parts = [status_line(status), date, framing]
    for name, value in headers:
        parts += (name, b": ", value, CRLF)
    for name, value in extra:
        parts += (name, b": ", value, CRLF)
    if close:
        parts.append(b"connection: close\r\n")
    parts.append(CRLF)
    return b"".join(parts)


def content_length(size: int) -> bytes:
    return b"content-length: " + str(size).encode() + CRLF


CHUNKED = b"transfer-encoding: chunked\r\n"


def protocol_error(status: int, message: str, date: bytes, dialect: Dialect) -> bytes:
    """A complete answer, worded in `dialect`, to a request the server could not read; the
    connection is closed after it."""
    body = dialect.error_body(RequestError(status, message))
    type_line = b"content-type: " + dialect.media_type + CRLF
    return head(status, date, [], [], type_line + content_length(len(body)), True) + body
