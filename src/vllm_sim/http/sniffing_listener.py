"""A TLS port that also takes plaintext gRPC: each accepted connection's first bytes are
looked at without being read (MSG_PEEK), before any TLS handshake.

A TLS ClientHello goes to TLS, as a plain TLS listener would take it. The HTTP/2 client
preface in clear (a gRPC client with prior knowledge) is served in clear: the connection
then splices it to the gRPC server. Anything else goes to TLS too, whose handshake refuses
it: plain HTTP/1.1 is not served on a TLS port.

Only used when both TLS and gRPC are on; otherwise the event loop's own listener serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from vllm_sim.http.splice import HTTP2_PREFACE, preface_state

log = logging.getLogger("vllm_sim.http")

_TLS_HANDSHAKE_RECORD = 0x16  # the first byte of every TLS ClientHello
# How often a connection whose first bytes are only part of the preface is looked at
# again (its readiness stays set while they wait in the kernel: no busy loop on it).
_PARTIAL_RECHECK = 0.01


class SniffingListener:
    """Accepts on `host:port` and routes each connection (see the module's doc)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext,
        sniff_timeout: float,
    ) -> None:
        self._loop = loop
        self._factory = factory
        self._context = context
        self._sniff_timeout = sniff_timeout
        self._sockets: list[socket.socket] = []
        self._pending: dict[socket.socket, asyncio.TimerHandle] = {}
        self.port = 0

    def listen(self, host: str | None, port: int, backlog: int) -> None:
        """Binds every address `host` names (all interfaces if None); OSError if it
        cannot."""
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        seen: set[tuple[object, ...]] = set()
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address if port or not self.port else (address[0], self.port))
            sock.listen(backlog)
            sock.setblocking(False)
            self.port = self.port or sock.getsockname()[1]
            self._sockets.append(sock)
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self) -> None:
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
        for conn, timer in list(self._pending.items()):
            timer.cancel()
            self._drop(conn)

    def _accept(self, server: socket.socket) -> None:
        for _ in range(64):  # a burst of connections, a bounded share of this turn
            try:
                conn, _ = server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the next turn tries again
                log.warning("accept failed: %s", exc)
                return
            conn.setblocking(False)
            self._pending[conn] = self._loop.call_later(self._sniff_timeout, self._drop, conn)
            self._loop.add_reader(conn.fileno(), self._look, conn)

    def _look(self, conn: socket.socket) -> None:
        try:
            head = conn.recv(len(HTTP2_PREFACE), socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not head:  # closed before saying anything
            self._drop(conn)
            return
        clear = head[0] != _TLS_HANDSHAKE_RECORD and preface_state(head)
        if clear is None:  # part of the preface so far: look again shortly
            self._loop.remove_reader(conn.fileno())
            self._loop.call_later(_PARTIAL_RECHECK, self._look_again, conn)
            return
        self._hand_on(conn, tls=not clear)

    def _look_again(self, conn: socket.socket) -> None:
        if conn in self._pending:
            self._loop.add_reader(conn.fileno(), self._look, conn)

    def _hand_on(self, conn: socket.socket, tls: bool) -> None:
        self._loop.remove_reader(conn.fileno())
        timer = self._pending.pop(conn, None)
        if timer is not None:
            timer.cancel()
        self._loop.create_task(self._connect(conn, tls))

    async def _connect(self, conn: socket.socket, tls: bool) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._factory,
                conn,
                ssl=self._context if tls else None,
                ssl_handshake_timeout=self._sniff_timeout if tls else None,
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            conn.close()  # a failed handshake: nothing to answer

    def _drop(self, conn: socket.socket) -> None:
        timer = self._pending.pop(conn, None)
        if timer is not None:
            timer.cancel()
        with contextlib.suppress(ValueError, OSError):  # closed already
            self._loop.remove_reader(conn.fileno())
        conn.close()
