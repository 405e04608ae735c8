"""Starts, waits for and stops the two servers; each runs in its own process group so that
stopping it also ends the workers it spawned (vLLM's engine core)."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes] | None  # None: attached to a server started elsewhere
    port: int
    log: Path | None
    argv: list[str]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def start(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> Server:
    """`argv` may hold `{port}`, replaced by a free port."""
    port = free_port()
    argv = [arg.replace("{port}", str(port)) for arg in argv]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return Server(name, process, port, log, argv)


def attach(name: str, port: int) -> Server:
    return Server(name, None, port, None, [f"(already running on port {port})"])


def healthy(server: Server) -> bool:
    connection = http.client.HTTPConnection(HOST, server.port, timeout=2)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with {server.process.returncode}; see {server.log}\n"
                + tail(server.log)
            )
        if healthy(server):
            return
        time.sleep(1)
    raise RuntimeError(f"{server.name} not healthy after {timeout:.0f} s; see {server.log}")


def tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def stop(server: Server, grace: float = 20.0) -> None:
    process = server.process
    if process is None or process.poll() is not None:
        return
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
