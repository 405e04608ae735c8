"""One served instance on the runner: its listening side, gRPC side, background tasks and
phase schedule, and the instance itself, which a restart phase replaces.

A restart is what a restarted pod shows its clients. Going down closes the listening
socket (a client connecting gets connection refused), cuts every open connection and stops
the engine's requests; coming back serves on the same port an instance made afresh from
the configuration it was started with (a new engine, KV cache, metrics and start time; an
admin update is lost as a restarted pod loses it), while the schedule runs on. Going down
and coming back happen at once on the event loop as far as requests can see; what must
wait (sockets to close, the port to listen on) runs in order in one chain of tasks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from vllm_sim.http.connection import HttpConnection
from vllm_sim.http.limits import ConnectionLimits
from vllm_sim.http.server import HttpServer
from vllm_sim.http.splice import ALPN_PROTOCOLS
from vllm_sim.server.build import Instance
from vllm_sim.server.control import LiveConfig
from vllm_sim.server.grpc_side import GrpcSide
from vllm_sim.server.phases import PhaseDriver
from vllm_sim.server.tls import TlsSetup

log = logging.getLogger("vllm_sim")
http_log = logging.getLogger("vllm_sim.http")

RESTARTED = "The server restarted: the request was stopped before it finished"


class ServedInstance:
    """An instance as the runner serves it; a PhaseTarget for its schedule's driver.
    `on_crash(status)` ends the process."""

    def __init__(
        self,
        instance: Instance,
        host: str,
        tls: TlsSetup | None,
        on_crash: Callable[[int], None],
    ) -> None:
        self.instance = instance
        self._started_as = instance.config
        self._host = host
        self._tls = tls
        self._on_crash = on_crash
        self._http: HttpServer | None = None
        self._grpc: GrpcSide | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._chain: asyncio.Task[None] | None = None  # going down and coming back, in order
        self.stopping = False  # the server stops: nothing comes back
        self.driver = PhaseDriver(self)
        self._wire(instance)

    def _wire(self, instance: Instance) -> None:
        control = instance.control
        control.on_phases = self.driver.start
        control.current_phase = self.driver.status

    @property
    def control(self) -> LiveConfig:
        return self.instance.control

    # ------------------------------------------------------------ serving
    async def listen(self) -> bool:
        """The instance's HTTP server listening (and its gRPC side); False, logged, if it
        cannot."""
        instance = self.instance
        cfg = instance.config
        read_timeout = cfg.request_read_timeout.seconds
        limits = ConnectionLimits(
            head_timeout=read_timeout,
            body_timeout=read_timeout,
            keep_alive_timeout=cfg.http_timeout_keep_alive.seconds,
        )
        app = instance.app
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
                    return False
            server.grpc_target = grpc_side.target
            if context is not None:
                context.set_alpn_protocols(list(ALPN_PROTOCOLS))
        try:
            await server.listen(self._host, instance.port, context)
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", self._host, instance.port, exc.strerror)
            if grpc_side is not None:
                await grpc_side.stop(0)
            return False
        self._http, self._grpc = server, grpc_side
        return True

    def announce(self) -> None:
        """Says where it serves, and starts its readiness clock and background tasks."""
        cfg, port = self.instance.config, self.instance.port
        scheme = "http" if self._tls is None else "https"
        host = self._host
        shown = f"[{host}]" if ":" in host else host
        log.info("vllm-sim serving %s on %s://%s:%d", cfg.display_model_name, scheme, shown, port)
        http_log.info("HTTP server listening on %s://%s:%d", scheme, shown, port)
        self.instance.readiness.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(run()) for run in self.instance.background]

    async def stop(self, grace: float) -> None:
        """Stops for good: the schedule, then what serves (if it is up)."""
        self.stopping = True
        self.driver.stop()
        if self._chain is not None:
            await self._chain
        await self._close(grace)

    async def _close(self, grace: float) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        server, grpc_side, self._http, self._grpc = self._http, self._grpc, None, None
        if grpc_side is not None:
            await grpc_side.stop(grace)
        if server is not None:
            await server.shutdown(grace)

    # ------------------------------------------------------------ what phases do
    def sleep(self, level: int) -> None:
        self.instance.sleep_mode.sleep(level)

    def wake(self) -> None:
        if self.instance.sleep_mode.asleep:  # woken by hand meanwhile: nothing to time
            self.instance.sleep_mode.wake()

    def crash(self, exit_code: int) -> None:
        self._on_crash(exit_code)

    def go_down(self) -> None:
        old = self.instance
        old.drain.active = True  # a request already read is refused, not started

        async def down() -> None:
            await self._close(0)  # cuts the connections: clients see them reset
            old.engine.stop_all(RESTARTED)

        self._then(down)

    def come_back(self) -> None:
        if self.stopping:
            return
        try:
            fresh = self.instance.remake(replace(self._started_as, phases=self.driver.schedule))
        except Exception:  # a dataset that no longer loads, say: the pod stays down
            log.exception("the instance on port %d could not restart", self.instance.port)
            return
        self.instance = fresh
        self._wire(fresh)

        async def up() -> None:
            if not self.stopping and await self.listen():
                self.announce()

        self._then(up)

    def _then(self, step: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Runs `step` once every step before it has ended."""
        previous = self._chain

        async def chained() -> None:
            if previous is not None:
                await previous
            try:
                await step()
            except Exception:  # logged here: the chain, and the server's stop, go on
                log.exception("restarting the instance on port %d failed", self.instance.port)

        self._chain = asyncio.get_running_loop().create_task(chained())
