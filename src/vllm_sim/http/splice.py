"""Hands an accepted connection that speaks HTTP/2 to another server on this host.

A gRPC client opens its connection with the HTTP/2 client preface. The HTTP/1.1 layer sees
it in the first bytes and gives the connection here: the bytes read so far and everything
after go to the gRPC server's local socket, and its answers come back, untouched. gRPC
cannot adopt a socket another server accepted, so one port serves both protocols this way.

Each side's flow control holds the other: when one side's write buffer fills, the other
stops being read, so a slow reader never makes this process buffer without limit.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import cast

log = logging.getLogger("vllm_sim.http")

# Where a handed-over connection goes: the local socket of the server behind it, awaited
# per connection, so that server may be started by its first connection.
Upstream = Callable[[], Awaitable[str]]

# What every HTTP/2 connection opens with (RFC 9113, section 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


# What a TLS port offers when gRPC shares it. The server's order decides: a client that
# offers both (curl, browsers) keeps HTTP/1.1, which the REST API speaks; a gRPC client
# offers only h2, gets it, and opens with the preface like a plaintext one.
ALPN_PROTOCOLS = ("http/1.1", "h2")


def preface_state(data: bytes) -> bool | None:
    """True if `data` opens with the HTTP/2 preface, False if it cannot, None if it is a
    shorter start of it (more bytes decide)."""
    size = min(len(data), len(HTTP2_PREFACE))
    if data[:size] != HTTP2_PREFACE[:size]:
        return False
    return True if size == len(HTTP2_PREFACE) else None


class Splice(asyncio.Protocol):
    """The client side of a handed-over connection (it becomes the transport's protocol)."""

    def __init__(
        self,
        client: asyncio.Transport,
        first: bytes,
        target: Upstream,
        on_closed: Callable[[Splice], None],
    ) -> None:
        self.client = client
        self._pending: list[bytes] = [first]
        self._upstream: asyncio.Transport | None = None
        self._on_closed = on_closed
        self._closed = False
        # Nothing more is read until the upstream connection exists: what is pending is
        # bounded by one read.
        client.pause_reading()
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_task(self._connect(loop, target))

    async def _connect(self, loop: asyncio.AbstractEventLoop, target: Upstream) -> None:
        try:
            address = await target()
        except Exception as exc:  # the server behind could not start: this connection ends
            log.warning("the gRPC server is not available: %s", exc)
            self.close()
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            # Connected here, then handed over: uvloop takes no abstract names (a leading
            # NUL) as a path, the socket module does.
            await loop.sock_connect(sock, address)
            transport, _ = await loop.create_unix_connection(lambda: _Upstream(self), sock=sock)
        except OSError as exc:
            sock.close()
            log.warning("the gRPC server's socket refused a connection: %s", exc)
            self.close()
            return
        if self._closed:
            transport.close()
            return
        self._upstream = transport
        transport.write(b"".join(self._pending))
        self._pending.clear()
        self.client.resume_reading()

    # -- the client's transport --

    def data_received(self, data: bytes) -> None:
        upstream = self._upstream
        if upstream is not None:
            upstream.write(data)
        else:
            self._pending.append(data)

    def eof_received(self) -> bool | None:
        upstream = self._upstream
        if upstream is not None and upstream.can_write_eof():
            upstream.write_eof()
            return True  # half-closed: the answers still come back
        return None

    def pause_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.pause_reading()

    def resume_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    # -- both --

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.client.is_closing():
            self.client.close()
        if self._upstream is not None and not self._upstream.is_closing():
            self._upstream.close()
        self._on_closed(self)

    def abort(self) -> None:
        self.client.abort()
        if self._upstream is not None:
            self._upstream.abort()
        self.close()


class _Upstream(asyncio.Protocol):
    """The gRPC server's side of a splice."""

    def __init__(self, splice: Splice) -> None:
        self._splice = splice
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        client = self._splice.client
        if not client.is_closing():
            client.write(data)

    def eof_received(self) -> bool | None:
        return None  # the server is done: close both

    def pause_writing(self) -> None:
        self._splice.client.pause_reading()

    def resume_writing(self) -> None:
        self._splice.client.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._splice.close()
