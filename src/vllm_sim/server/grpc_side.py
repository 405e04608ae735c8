"""An instance's gRPC side, started when first needed.

gRPC's core library is a large share of the process's memory (about 20 MiB resident, a
third of an idle server): a server no client calls over gRPC never loads it. The first
HTTP/2 connection on the HTTP port starts it (the connection waits, then is spliced to it
as every later one is); a server given a port of gRPC alone (--grpc-port) starts it with
the HTTP side, since nothing else would. The library is imported on a worker thread, so
the event loop keeps serving HTTP meanwhile.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_sim.server.grpc_server import GrpcServer

# What loads gRPC and protobuf: the server module and, through it, the service.
_GRPC_MODULE = "vllm_sim.server.grpc_server"


class GrpcSide:
    """Makes and starts the gRPC server once, on first use; `target` is what the HTTP
    layer awaits before splicing a connection."""

    def __init__(self, make: Callable[[float], GrpcServer], started: float) -> None:
        self._make = make
        self._started = started  # the process's start, which the service reports
        self._starting: asyncio.Future[GrpcServer] | None = None
        self._stopped = False

    @property
    def running(self) -> bool:
        starting = self._starting
        return starting is not None and starting.done() and starting.exception() is None

    async def target(self) -> str:
        """The gRPC server's local socket, once it serves; the first call starts it, and
        every call meanwhile shares that start. RuntimeError: gRPC cannot serve (a port
        that cannot be had), for this call and every later one."""
        if self._starting is None:
            if self._stopped:  # a connection that came in while the server stopped
                raise RuntimeError("the server is stopping")
            self._starting = asyncio.ensure_future(self._start())
        server = await asyncio.shield(self._starting)
        return server.target

    async def _start(self) -> GrpcServer:
        await asyncio.to_thread(importlib.import_module, _GRPC_MODULE)
        server = self._make(self._started)
        await server.start()
        gc.freeze()  # gRPC's modules, as the rest of start-up, out of the collector's walks
        return server

    async def stop(self, grace: float) -> None:
        """Lets calls in flight finish for `grace` seconds; nothing to do if never started."""
        self._stopped = True
        starting = self._starting
        if starting is None:
            return
        try:
            server = await starting
        except Exception:  # it never served: nothing to stop
            return
        await server.stop(grace)
