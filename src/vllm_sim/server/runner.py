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

from vllm_sim.server.build import Instance
from vllm_sim.server.served import ServedInstance
from vllm_sim.server.tls import TlsSetup

log = logging.getLogger("vllm_sim")

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
    A second signal exits at once with status 1. A crash phase of a schedule stops every
    instance at once and exits with the phase's status.
    """

    def __init__(self, instances: Sequence[Instance], host: str, tls: TlsSetup | None) -> None:
        self._served = [ServedInstance(i, host, tls, self._crash) for i in instances]
        self._tls = tls
        self._drain_task: asyncio.Task[None] | None = None
        self._first_signal = 0.0
        self._stopped: asyncio.Event | None = None
        self._grace = CLOSE_GRACE
        self.exit_status = 0

    async def run(self) -> int:
        self._stopped = asyncio.Event()
        for count, served in enumerate(self._served):
            if not await served.listen():
                await self._stop(self._served[:count], 0)
                return 1
        loop = asyncio.get_running_loop()
        for served in self._served:
            served.announce()
        origin = loop.time()  # time 0 of every schedule: the server listens
        for served in self._served:
            if served.instance.config.phases is not None:
                served.driver.start(served.instance.config.phases, origin)
        if self._tls is not None:
            self._tls.start_watching()
        # Everything built so far (modules, tables, the app) lives as long as the process:
        # kept out of the collector's reach, a full collection under load walks only what
        # requests made, which keeps its pause on the event loop short.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        with self._signals(loop):
            await self._stopped.wait()
        await self._stop(self._served, self._grace)
        return self.exit_status

    @staticmethod
    async def _stop(served: Sequence[ServedInstance], grace: float) -> None:
        await asyncio.gather(*(one.stop(grace) for one in served))

    def _crash(self, exit_status: int) -> None:
        """A crash phase: every instance stops now, connections cut, and the process exits
        with `exit_status` (the phase's log line said why)."""
        for served in self._served:
            served.driver.stop()
        self.exit_status = exit_status
        self._grace = 0.0
        assert self._stopped is not None
        self._stopped.set()

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
        for served in self._served:
            served.stopping = True  # the schedule ends; a restarted instance stays down
            served.driver.stop()
            served.instance.drain.active = True
        self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    def _open_requests(self) -> int:
        return sum(served.instance.engine.view.open_requests for served in self._served)

    async def _drain(self) -> None:
        timeout = max(served.instance.config.drain_timeout.seconds for served in self._served)
        deadline = time.monotonic() + timeout
        while self._open_requests() > 0 and time.monotonic() < deadline:
            await asyncio.sleep(_DRAIN_POLL)
        if self._open_requests() > 0:
            stopped = sum(served.instance.engine.stop_all(STOPPED) for served in self._served)
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
