"""Runs an instance on uvicorn (uvloop + httptools) with a draining graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import re
import signal
import socket
import time
from collections.abc import Generator

import uvicorn

from vllm_sim.server.build import Instance
from vllm_sim.server.http_protocol import BoundedHttpToolsProtocol
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
# Query parameters that may carry a secret; their values never reach the access log.
_SECRET_QUERY = re.compile(
    r"([?&](?:api[_-]?key|key|token|access[_-]?token|auth|password|secret)=)[^&#\s]*",
    re.IGNORECASE,
)


def redact_query(target: str) -> str:
    """`/v1/models?api_key=sk-1&x=2` -> `/v1/models?api_key=[REDACTED]&x=2`."""
    return _SECRET_QUERY.sub(r"\1[REDACTED]", target) if "?" in target else target


class RedactSecrets(logging.Filter):
    """Rewrites uvicorn's access-log line (client, method, path?query, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


class SimulatorServer(uvicorn.Server):
    """uvicorn, except that the first SIGTERM/SIGINT drains instead of closing at once.

    While draining, generation endpoints answer 503 and every other endpoint keeps
    working; once no request is queued or running the server stops and the process exits 0.
    If some are still open after --drain-timeout, they are stopped with an error (a stream
    gets an error event and [DONE], a waiting client a JSON 503) and the process exits 3.
    A second signal exits at once with status 1.
    """

    def __init__(self, config: uvicorn.Config, instance: Instance, tls: TlsSetup | None) -> None:
        super().__init__(config)
        self._instance = instance
        self._tls = tls
        self._drain_task: asyncio.Task[None] | None = None
        self._first_signal = 0.0
        self._background: list[asyncio.Task[None]] = []
        self.exit_status = 0

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return  # uvicorn could not bind: it has logged why, and will exit non-zero
        cfg, port = self._instance.config, self._instance.port
        scheme = "http" if self._tls is None else "https"
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        log.info("vllm-sim serving %s on %s://%s:%d", cfg.display_model_name, scheme, shown, port)
        self._instance.readiness.start()
        loop = asyncio.get_running_loop()
        self._background = [loop.create_task(run()) for run in self._instance.background]
        if self._tls is not None:
            self._tls.start_watching()
        # Everything built so far (modules, tables, the app) lives as long as the process:
        # kept out of the collector's reach, a full collection under load walks only what
        # requests made, which keeps its pause on the event loop short.
        gc.freeze()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for task in self._background:
            task.cancel()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
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
        self._instance.app.draining = True
        self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        engine = self._instance.engine
        deadline = time.monotonic() + self._instance.config.drain_timeout / 1e9
        while engine.open_requests > 0 and time.monotonic() < deadline:
            await asyncio.sleep(_DRAIN_POLL)
        if engine.open_requests > 0:
            stopped = engine.stop_all(STOPPED)
            log.warning("drain timed out: %d requests stopped with an error", stopped)
            self.exit_status = DRAIN_CUT_SHORT
            await asyncio.sleep(_FLUSH)  # their answers are written before sockets close
        self.should_exit = True


def serve(instance: Instance, host: str, tls: TlsSetup | None = None) -> int:
    """Serves until stopped; the exit status (0, or DRAIN_CUT_SHORT)."""
    cfg = instance.config
    config = uvicorn.Config(
        instance.app,
        host=host,
        port=instance.port,
        loop="uvloop",
        http=BoundedHttpToolsProtocol,
        lifespan="off",
        access_log=cfg.log_http or cfg.enable_log_requests,
        log_level=cfg.uvicorn_log_level,
        server_header=False,
        timeout_graceful_shutdown=5,
        backlog=4096,
        ssl_context_factory=None if tls is None else (lambda _config, _default: tls.context),
    )
    # uvicorn configured its loggers in Config(); the filter goes on after that.
    access = logging.getLogger("uvicorn.access")
    access.addFilter(RedactSecrets())
    if config.access_log:
        # Asked-for request lines appear whatever --uvicorn-log-level says, as vLLM's request
        # log (--enable-log-requests) is its own logger, not uvicorn's.
        access.setLevel(logging.INFO)
    server = SimulatorServer(config, instance, tls)
    server.run()
    return server.exit_status
