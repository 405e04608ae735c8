"""What the listening side and its connections share: the application and its limits, the
clock of the Date header, whether the server is closing, and the count of held connections.

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
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from vllm_sim.http.limits import ConnectionLimits
from vllm_sim.http.messages import Dialect
from vllm_sim.http.splice import Upstream
from vllm_sim.http.wire import DateHeader

log = logging.getLogger("vllm_sim.http")
ACCESS_LOG = "vllm_sim.http.access"
access_log = logging.getLogger(ACCESS_LOG)

# Descriptors kept for everything else the process opens (files, the engine's sockets).
_RESERVED_DESCRIPTORS = 128
# The exchange of one request (connection.py's Cycle) -> its answer, written through it.
Application = Callable[[Any], Awaitable[None]]


class Held(Protocol):
    """A connection as the server counts, sweeps and closes it."""

    open: bool

    def is_idle(self) -> bool: ...

    def timed_out(self, now: float) -> bool: ...

    def shutdown(self) -> None: ...

    def abort(self) -> None: ...


class Spliced(Protocol):
    """A connection handed to another server (splice.py): it holds two descriptors."""

    def abort(self) -> None: ...


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


class ServerState:
    """One port's shared state (see the module's docstring)."""

    def __init__(
        self,
        app: Application,
        max_body_bytes: int,
        limits: ConnectionLimits | None = None,
        max_connections: int | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.limits = limits or ConnectionLimits()
        self.dialect = dialect or Dialect()
        self.loop = asyncio.get_running_loop()
        self.date = DateHeader()
        self.port = 0
        self.closing = False  # new requests are told the connection closes after them
        # In the order they opened (a dict keeps insertion order): the oldest first.
        self.connections: dict[Held, None] = {}
        if max_connections is None:
            max_connections = max(16, raise_descriptor_limit() - _RESERVED_DESCRIPTORS)
        self.max_connections = max_connections
        self.shed = 0  # connections closed to make room for new ones
        # Read once: the access log's level is set before the server starts.
        self.log_access = access_log.isEnabledFor(logging.INFO)
        # The gRPC server sharing this port: connections that open with the HTTP/2
        # preface are spliced to its local socket (see splice.py). None: HTTP/1.1 only.
        self.grpc_target: Upstream | None = None
        self.splices: set[Spliced] = set()
        self.all_closed: asyncio.Future[None] | None = None  # set while shutting down

    def connection_opened(self, conn: Held) -> None:
        self.connections[conn] = None
        # A spliced gRPC connection holds descriptors too (two: its own and the socket to
        # the gRPC server): counted against the same ceiling.
        if len(self.connections) + 2 * len(self.splices) > self.max_connections:
            self._make_room(conn)

    def connection_closed(self, conn: Held) -> None:
        self.connections.pop(conn, None)
        waiter = self.all_closed
        if waiter is not None and not self.connections and not waiter.done():
            waiter.set_result(None)

    def connection_handed_over(self, conn: Held, splice: Spliced) -> None:
        """`conn`'s transport now belongs to `splice`: counted as one from now on."""
        self.connection_closed(conn)
        self.splices.add(splice)

    def splice_closed(self, splice: Spliced) -> None:
        self.splices.discard(splice)

    def _make_room(self, newcomer: Held) -> None:
        oldest = next((c for c in self.connections if c is not newcomer and c.is_idle()), None)
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
