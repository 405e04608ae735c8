"""Starts the real simulator in a subprocess on a free loopback port, for tests."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

STARTUP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class SimServer:
    """`with SimServer(["--max-num-seqs", "2"]) as sim: httpx.get(sim.url + "/health")`."""

    def __init__(
        self,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        model: str = "test-model",
        port: int | None = None,
        https: bool = False,
        host: str = "127.0.0.1",
        fd_limit: int | None = None,
        command: Sequence[str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.host = host  # where the tests reach it (give --host in `args` to bind elsewhere)
        self.scheme = "https" if https else "http"
        self.model = model
        self.args = ["--model", model, "--port", str(self.port), "--seed", "42", *args]
        # A whole command line run as given (a container's entrypoint and arguments, say)
        # instead of `python -m vllm_sim ARGS`; it must serve on `port`.
        self.command = list(command) if command is not None else None
        # A key in the developer's own environment must not lock the tests out.
        inherited = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
        self.env = {**inherited, **(env or {})}
        # The child's RLIMIT_NOFILE (soft and hard), which bounds its connections; None
        # keeps the limit it inherits.
        self.fd_limit = fd_limit
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def start(self) -> SimServer:
        # Output goes to a file, not a pipe: a pipe nobody reads fills up and blocks the server.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the server
        self.process = subprocess.Popen(
            self.command or [sys.executable, "-m", "vllm_sim", *self.args],
            env=self.env,
            stdout=self.log,
            stderr=self.log,
            preexec_fn=None if self.fd_limit is None else self._limit_descriptors,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"simulator exited early: {self.stderr()}")
            try:
                # Self-signed certificates cannot be verified: that is the point of them.
                httpx.get(self.url + "/health", timeout=0.5, verify=False)
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("simulator did not start in time")

    def _limit_descriptors(self) -> None:
        """Runs in the child before it executes the server: caps its open files."""
        assert self.fd_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

    def stop(self, timeout: float = 35.0) -> int:
        """SIGTERM, wait for the drain; returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def stderr(self) -> str:
        """Everything the server has written so far (stdout and stderr)."""
        assert self.log is not None
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def started(args: Sequence[str] = ()) -> tuple[SimServer, subprocess.Popen[bytes]]:
    """A started server and its process, for tests that signal it and stop it themselves."""
    server = SimServer(args).start()
    assert server.process is not None
    return server, server.process


def run_cli(
    args: Sequence[str | Path],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    """Runs `python -m vllm_sim ARGS` to completion, in `cwd` (config errors, --help, the
    what-if commands)."""
    return subprocess.run(
        [sys.executable, "-m", "vllm_sim", *map(str, args)],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
