"""The listening side: accepts connections, sweeps them for timeouts, and closes them
gracefully. What it shares with its connections (the count it bounds) is a ServerState."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable

from vllm_sim.http.limits import ConnectionLimits
from vllm_sim.http.messages import Dialect
from vllm_sim.http.sniffing_listener import SniffingListener
from vllm_sim.http.splice import Upstream
from vllm_sim.http.state import Application, ServerState

_SWEEP_INTERVAL = 0.5
# Makes the protocol of one accepted connection (connection.py's HttpConnection).
ConnectionFactory = Callable[[ServerState], asyncio.Protocol]


class HttpServer:
    """Serves one application on one port, each connection by `connection`."""

    def __init__(
        self,
        app: Application,
        max_body_bytes: int,
        connection: ConnectionFactory,
        limits: ConnectionLimits | None = None,
        max_connections: int | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self.state = ServerState(app, max_body_bytes, limits, max_connections, dialect)
        self._connection = connection
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._sniffing: SniffingListener | None = None

    @property
    def port(self) -> int:
        return self.state.port

    @property
    def grpc_target(self) -> Upstream | None:
        return self.state.grpc_target

    @grpc_target.setter
    def grpc_target(self, target: Upstream | None) -> None:
        self.state.grpc_target = target

    async def listen(
        self,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 4096,
    ) -> None:
        state = self.state
        loop = state.loop
        factory: Callable[[], asyncio.Protocol] = lambda: self._connection(state)  # noqa: E731
        head_timeout = state.limits.head_timeout
        if ssl_context is not None and state.grpc_target is not None:
            # gRPC in clear shares the TLS port: each connection is looked at first.
            sniffing = SniffingListener(loop, factory, ssl_context, head_timeout)
            sniffing.listen(host, port, backlog)
            self._sniffing = sniffing
            state.port = sniffing.port
        else:
            # A TLS handshake that stalls holds a descriptor the connection cap cannot see
            # yet (the connection exists only once it completes): it gets the head's time.
            server = await loop.create_server(
                factory,
                host or None,
                port,
                ssl=ssl_context,
                backlog=backlog,
                reuse_address=True,
                ssl_handshake_timeout=head_timeout if ssl_context is not None else None,
            )
            self._server = server
            sockets = server.sockets
            state.port = sockets[0].getsockname()[1] if sockets else port
        self._sweeper = loop.call_later(_SWEEP_INTERVAL, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        for conn in list(self.state.connections):
            conn.timed_out(now)
        self._sweeper = self.state.loop.call_later(_SWEEP_INTERVAL, self._sweep)

    async def shutdown(self, grace: float) -> None:
        """Stops accepting, closes idle connections at once and the others once their
        requests are answered; after `grace` seconds, closes what is left."""
        state = self.state
        state.closing = True
        if self._server is not None:
            self._server.close()
        if self._sniffing is not None:
            self._sniffing.close()
        for conn in list(state.connections):
            conn.shutdown()
        if state.connections:
            state.all_closed = state.loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(state.all_closed), grace)
            except TimeoutError:
                for conn in list(state.connections):
                    conn.abort()
        # gRPC calls drain in their own server; a splice it has not closed by now is cut.
        for splice in list(state.splices):
            splice.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            await self._server.wait_closed()
