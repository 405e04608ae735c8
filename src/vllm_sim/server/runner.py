"""Runs instances on the HTTP server, on uvloop, with a draining graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from collections.abc import Generator, Sequence

import uvloop

from vllm_sim.http.connection import HttpConnection
from vllm_sim.http.limits import ConnectionLimits
from vllm_sim.http.server import HttpServer
from vllm_sim.http.splice import ALPN_PROTOCOLS
from vllm_sim.server.build import Instance
from vllm_sim.server.grpc_side import GrpcSide
from vllm_sim.server.tls import TlsSetup

log = logging.getLogger("vllm_sim")
http_log = logging.getLogger("vllm_sim.http")

# The exit status of a drain that had to stop requests (0 is a clean drain, 1 a second signal).
DRAIN_CUT_SHORT = 3
STOPPED = "The server is shutting down: the request was stopped before it finished"
# How long stopped requests get to write their error answers before the sockets close.
_FLUSH = 0.2
# A signal this soon after the first is the same request to stop, relayed by a parent
# process (make, timeout, a process group); a deliberate second one comes later.
ECHO_WINDOW = 0.1
_DRAIN_POLL = 0.01
# How long open connections get to finish their answers once the server stops.
CLOSE_GRACE = 5.0
# The collector's thresholds under load. Requests free almost everything they make by
# reference counting (a finished stream lets go of its sequences), but every 700
# allocations (Python's default) the young generation was walked, streams alive for a
# second were promoted, and full collections over thousands of open streams paused the
# event loop for tens of milliseconds: at 1,200 streams of ITL 20 ms, ITL p99 82 ms and
# TTFT p99 198 ms, against 24 ms and 113 ms (and 96% against 80% of a core) with the
# young generation walked every 100,000.
GC_THRESHOLDS = (100_000, 20, 100)


class SimulatorServer:
    """Serves instances (one, or a fleet on consecutive ports) until stopped; the first
    SIGTERM/SIGINT drains rather than closing at once.

    While draining, generation endpoints answer 503 and every other endpoint keeps
    working; once no request is queued or running the server stops and the process exits 0.
    If some are still open after --drain-timeout, they are stopped with an error (a stream
    gets an error event and [DONE], a waiting client a JSON 503) and the process exits 3.
    A second signal exits at once with status 1.
    """

    def __init__(self, instances: Sequence[Instance], host: str, tls: TlsSetup | None) -> None:
        self._instances = list(instances)
        self._host = host
        self._tls = tls
        self._drain_task: asyncio.Task[None] | None = None
        self._first_signal = 0.0
        self._stopped: asyncio.Event | None = None
        self.exit_status = 0

    async def run(self) -> int:
        self._stopped = asyncio.Event()
        started: list[tuple[HttpServer, GrpcSide | None]] = []
        for instance in self._instances:
            served = await self._start(instance)
            if served is None:
                await self._stop(started, 0)
                return 1
            started.append(served)
        for instance in self._instances:
            self._announce(instance)
        loop = asyncio.get_running_loop()
        background = [
            loop.create_task(run()) for instance in self._instances for run in instance.background
        ]
        if self._tls is not None:
            self._tls.start_watching()
        # Everything built so far (modules, tables, the app) lives as long as the process:
        # kept out of the collector's reach, a full collection under load walks only what
        # requests made, which keeps its pause on the event loop short.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        with self._signals(loop):
            await self._stopped.wait()
        for task in background:
            task.cancel()
        await self._stop(started, CLOSE_GRACE)
        return self.exit_status

    async def _start(self, instance: Instance) -> tuple[HttpServer, GrpcSide | None] | None:
        """The instance's HTTP server listening (and its gRPC side); None if it cannot."""
        app = instance.app
        cfg = instance.config
        read_timeout = cfg.request_read_timeout.seconds
        limits = ConnectionLimits(
            head_timeout=read_timeout,
            body_timeout=read_timeout,
            keep_alive_timeout=cfg.http_timeout_keep_alive.seconds,
        )
        server = HttpServer(
            app.handle, app.max_body_bytes, HttpConnection, limits, dialect=app.dialect
        )
        context = None if self._tls is None else self._tls.context
        grpc_side = None
        if instance.grpc is not None:
            grpc_side = GrpcSide(instance.grpc, time.monotonic())
            if cfg.grpc_port is not None:  # a port of its own: nothing else would start it
                try:
                    await grpc_side.target()
                except RuntimeError as exc:  # grpc's way of saying a port cannot be had
                    log.error("cannot serve gRPC on --grpc-port %s: %s", cfg.grpc_port, exc)
                    return None
            server.grpc_target = grpc_side.target
            if context is not None:
                context.set_alpn_protocols(list(ALPN_PROTOCOLS))
        try:
            await server.listen(self._host, instance.port, context)
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", self._host, instance.port, exc.strerror)
            if grpc_side is not None:
                await grpc_side.stop(0)
            return None
        return server, grpc_side

    @staticmethod
    async def _stop(started: list[tuple[HttpServer, GrpcSide | None]], grace: float) -> None:
        async def stop(server: HttpServer, grpc_side: GrpcSide | None) -> None:
            if grpc_side is not None:
                await grpc_side.stop(grace)
            await server.shutdown(grace)

        await asyncio.gather(*(stop(server, grpc_side) for server, grpc_side in started))

    def _announce(self, instance: Instance) -> None:
        cfg, port = instance.config, instance.port
        scheme = "http" if self._tls is None else "https"
        host = self._host
        shown = f"[{host}]" if ":" in host else host
        log.info("vllm-sim serving %s on %s://%s:%d", cfg.display_model_name, scheme, shown, port)
        http_log.info("HTTP server listening on %s://%s:%d", scheme, shown, port)
        instance.readiness.start()

    @contextlib.contextmanager
    def _signals(self, loop: asyncio.AbstractEventLoop) -> Generator[None, None, None]:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        now = time.monotonic()
        if self._drain_task is not None:
            if now - self._first_signal < ECHO_WINDOW:
                return  # the same stop, delivered twice (e.g. by make and by timeout)
            log.warning("second %s: exiting now", signal.Signals(sig).name)
            os._exit(1)
        self._first_signal = now
        log.info("%s received: draining in-flight requests", signal.Signals(sig).name)
        for instance in self._instances:
            instance.drain.active = True
        self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    def _open_requests(self) -> int:
        return sum(instance.engine.view.open_requests for instance in self._instances)

    async def _drain(self) -> None:
        timeout = max(instance.config.drain_timeout.seconds for instance in self._instances)
        deadline = time.monotonic() + timeout
        while self._open_requests() > 0 and time.monotonic() < deadline:
            await asyncio.sleep(_DRAIN_POLL)
        if self._open_requests() > 0:
            stopped = sum(instance.engine.stop_all(STOPPED) for instance in self._instances)
            log.warning("drain timed out: %d requests stopped with an error", stopped)
            self.exit_status = DRAIN_CUT_SHORT
            await asyncio.sleep(_FLUSH)  # their answers are written before sockets close
        assert self._stopped is not None
        self._stopped.set()


def serve(instance: Instance, host: str, tls: TlsSetup | None = None) -> int:
    """Serves until stopped; the exit status (0, 1 if the port cannot be had, or
    DRAIN_CUT_SHORT)."""
    return serve_all([instance], host, tls)


def serve_all(instances: Sequence[Instance], host: str, tls: TlsSetup | None = None) -> int:
    """Serves every instance on one event loop until stopped (see `serve`)."""
    server = SimulatorServer(instances, host, tls)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(server.run())
