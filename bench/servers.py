"""Server subprocesses (simulator or baseline) on a free 127.0.0.1 port, pinned to CPU 0."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from bench.cpu import SERVER_CPU, pin

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 20.0
STOP_TIMEOUT = 40.0
SEED = "42"
_TROUBLE = ("Traceback", "ERROR", "CRITICAL", "Exception")


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """`with Server(name, argv, port) as server:` starts, waits for /health, then stops."""

    def __init__(
        self, name: str, argv: list[str], port: int, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.env = None if env is None else {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.exit_code: int | None = None
        self.problems: list[str] = []  # error lines in its log, a bad exit status
        self.started_in = 0.0  # seconds from spawn to the first 200 from /health
        self.peak_rss_mib = 0.0  # high-water resident memory, read just before the stop

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self.process is not None:
            raise ServerError(f"{self.name} was already started")
        # The log lives as long as the server process; stop() closes it.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        spawned = time.monotonic()
        self.process = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        pin(self.process.pid, SERVER_CPU)
        self._wait_ready()
        self.started_in = time.monotonic() - spawned

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if not self.alive():
                text = self.log_text()
                self.stop()
                raise ServerError(f"{self.name} exited at startup:\n{text}")
            if self._healthy():
                return
            time.sleep(0.005)
        self.stop()
        raise ServerError(f"{self.name} did not answer /health within {STARTUP_TIMEOUT} s")

    def _healthy(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def stop(self) -> None:
        """SIGTERM (the simulator drains), then SIGKILL if it does not exit in time."""
        process = self.process
        if process is None or self.exit_code is not None:
            return
        if process.poll() is None:
            self.peak_rss_mib = peak_rss_mib(process.pid)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.problems.append(f"did not exit {STOP_TIMEOUT:.0f} s after SIGTERM: killed")
                process.kill()
                process.wait()
        self.exit_code = process.returncode
        if self.exit_code not in (0, -signal.SIGTERM):
            self.problems.append(f"exit status {self.exit_code}")
        self.problems.extend(self._log_trouble())
        if self.log is not None:
            self.log.close()

    def log_text(self) -> str:
        if self.log is None or self.log.closed:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def _log_trouble(self, limit: int = 10) -> list[str]:
        lines = [line for line in self.log_text().splitlines() if any(t in line for t in _TROUBLE)]
        return lines[:limit]


def peak_rss_mib(pid: int) -> float:
    """The process's resident-memory high-water mark (VmHWM) in MiB; 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            line = next((line for line in status if line.startswith(b"VmHWM:")), None)
    except OSError:
        return 0.0
    return int(line.split()[1]) / 1024 if line else 0.0


def simulator(
    model: str, args: list[str], name: str = "simulator", env: dict[str, str] | None = None
) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "vllm_sim", "--model", model, "--port", str(port)]
    return Server(name, [*argv, "--seed", SEED, *args], port, env)


def baseline(model: str, args: list[str], name: str = "baseline") -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "bench.baseline", "--model", model, "--port", str(port)]
    return Server(name, [*argv, *args], port)


def raw_baseline(model: str, name: str = "raw baseline") -> Server:
    """The same answers as `baseline`, from an asyncio Protocol with no ASGI or uvicorn."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.raw_baseline", "--model", model, "--port", str(port)]
    return Server(name, argv, port)
