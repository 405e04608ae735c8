"""The listening side: accepts connections, bounds how many are held, times them out, and
closes them gracefully.

Every connection holds a file descriptor. Past a ceiling derived from the process's limit
(raised to its hard limit at start-up), a new connection takes the place of the oldest one
with no answer being written (an idle keep-alive connection, or one still sending its
request), so clients that open connections and send nothing cannot lock everyone else out.
Connections are kept in the order they opened, so that one is found by walking from the
oldest, without sorting them all on every accept.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
import time
from collections.abc import Callable

from vllm_sim.http.connection import Application, ConnectionLimits, HttpConnection, access_log
from vllm_sim.http.sniffing_listener import SniffingListener
from vllm_sim.http.splice import Splice
from vllm_sim.http.wire import DateHeader

log = logging.getLogger("vllm_sim.http")

# Descriptors kept for everything else the process opens (files, the engine's sockets).
_RESERVED_DESCRIPTORS = 128
_SWEEP_INTERVAL = 0.5


def raise_descriptor_limit() -> int:
    """Raises this process's open-file limit to its hard limit; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class HttpServer:
    """Serves one application on one port."""

    def __init__(
        self,
        app: Application,
        max_body_bytes: int,
        limits: ConnectionLimits | None = None,
        max_connections: int | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.limits = limits or ConnectionLimits()
        self.loop = asyncio.get_running_loop()
        self.date = DateHeader()
        self.port = 0
        self.closing = False  # new requests are told the connection closes after them
        # In the order they opened (a dict keeps insertion order): the oldest first.
        self.connections: dict[HttpConnection, None] = {}
        if max_connections is None:
            max_connections = max(16, raise_descriptor_limit() - _RESERVED_DESCRIPTORS)
        self.max_connections = max_connections
        self.shed = 0  # connections closed to make room for new ones
        # Read once: the access log's level is set before the server starts.
        self.log_access = access_log.isEnabledFor(logging.INFO)
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._all_closed: asyncio.Future[None] | None = None
        # The local socket of a gRPC server sharing this port: connections that open with
        # the HTTP/2 preface are spliced to it (see splice.py). None: HTTP/1.1 only.
        self.grpc_target: str | None = None
        self.splices: set[Splice] = set()
        self._sniffing: SniffingListener | None = None

    async def listen(
        self,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 4096,
    ) -> None:
        factory: Callable[[], HttpConnection] = lambda: HttpConnection(self)  # noqa: E731
        # A TLS handshake that stalls holds a descriptor the connection cap cannot see yet
        # (the connection exists only once it completes): it gets the head's time.
        handshake = self.limits.head_timeout if ssl_context is not None else None
        if ssl_context is not None and self.grpc_target is not None:
            # gRPC in clear shares the TLS port: each connection is looked at first.
            sniffing = SniffingListener(self.loop, factory, ssl_context, self.limits.head_timeout)
            sniffing.listen(host, port, backlog)
            self._sniffing = sniffing
            self.port = sniffing.port
            self._sweeper = self.loop.call_later(_SWEEP_INTERVAL, self._sweep)
            return
        server = await self.loop.create_server(
            factory,
            host or None,
            port,
            ssl=ssl_context,
            backlog=backlog,
            reuse_address=True,
            ssl_handshake_timeout=handshake,
        )
        self._server = server
        sockets = server.sockets
        self.port = sockets[0].getsockname()[1] if sockets else port
        self._sweeper = self.loop.call_later(_SWEEP_INTERVAL, self._sweep)

    # -- told by connections --

    def connection_opened(self, conn: HttpConnection) -> None:
        self.connections[conn] = None
        # A spliced gRPC connection holds descriptors too (two: its own and the socket to
        # the gRPC server): counted against the same ceiling.
        if len(self.connections) + 2 * len(self.splices) > self.max_connections:
            self._make_room(conn)

    def connection_closed(self, conn: HttpConnection) -> None:
        self.connections.pop(conn, None)
        waiter = self._all_closed
        if waiter is not None and not self.connections and not waiter.done():
            waiter.set_result(None)

    def connection_handed_over(self, conn: HttpConnection) -> None:
        """`conn`'s transport now belongs to a splice: it is no longer counted here."""
        self.connection_closed(conn)

    def splice_opened(self, splice: Splice) -> None:
        self.splices.add(splice)

    def splice_closed(self, splice: Splice) -> None:
        self.splices.discard(splice)

    def _make_room(self, newcomer: HttpConnection) -> None:
        oldest = next(
            (c for c in self.connections if c is not newcomer and c.open and c.is_idle()), None
        )
        if oldest is not None:
            oldest.abort()
            self.connections.pop(oldest, None)
            self.shed += 1
            return
        # Every held connection carries a request being answered: the newcomer waits
        # for none of them.
        newcomer.abort()
        self.connections.pop(newcomer, None)
        self.shed += 1
        if self.shed == 1 or self.shed % 1000 == 0:
            log.warning(
                "%d connections open, the most this process can hold: new ones are refused",
                self.max_connections,
            )

    def _sweep(self) -> None:
        now = time.monotonic()
        for conn in list(self.connections):
            conn.timed_out(now)
        self._sweeper = self.loop.call_later(_SWEEP_INTERVAL, self._sweep)

    # -- stopping --

    async def shutdown(self, grace: float) -> None:
        """Stops accepting, closes idle connections at once and the others once their
        requests are answered; after `grace` seconds, closes what is left."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        if self._sniffing is not None:
            self._sniffing.close()
        for conn in list(self.connections):
            conn.shutdown()
        if self.connections:
            self._all_closed = self.loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._all_closed), grace)
            except TimeoutError:
                for conn in list(self.connections):
                    conn.abort()
        # gRPC calls drain in their own server; a splice it has not closed by now is cut.
        for splice in list(self.splices):
            splice.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            await self._server.wait_closed()
