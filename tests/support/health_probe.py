"""GET /health back to back on one keep-alive connection, from a process of its own, keeping
the slowest answer: a measure of how long the server's event loop is held.

The probe runs in a separate process so that the test's own client work (reading a
100 MB answer holds the test process's GIL) never delays it: only the server can.
Run as `python -m tests.support.health_probe PORT`: it prints `ready` once connected,
probes until its stdin closes, then prints `<worst seconds> <count>`.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from pathlib import Path

REQUEST = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n"
ROOT = Path(__file__).resolve().parents[2]


class HealthProbe:
    def __init__(self, port: int) -> None:
        self._port = port
        self._process: subprocess.Popen[str] | None = None
        self.worst = 0.0
        self.count = 0

    def __enter__(self) -> HealthProbe:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.health_probe", str(self._port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self._process.stdout is not None
        assert self._process.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc: object) -> None:
        process = self._process
        assert process is not None
        out, _ = process.communicate(timeout=30)  # closes stdin: the probe stops
        worst, count = str(out).split()
        self.worst, self.count = float(worst), int(count)


def _complete(answer: bytes) -> bool:
    head, end, body = answer.partition(b"\r\n\r\n")
    if not end:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return True


def _probe(port: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print("ready", flush=True)
    worst, count = 0.0, 0
    while not select.select([sys.stdin], [], [], 0)[0]:
        start = time.perf_counter()
        sock.sendall(REQUEST)
        answer = b""
        while not _complete(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        worst = max(worst, time.perf_counter() - start)
        count += 1
        time.sleep(0.002)
    sock.close()
    print(worst, count, flush=True)


def read_niced(url: str, body: bytes) -> tuple[int, int]:
    """POSTs `body` and reads the whole answer from a process at the lowest CPU priority:
    (status, bytes read). On a small machine the reader would otherwise take the CPU the
    server and the probe need, and the probe would time the machine, not the server."""
    reader = (
        "import os, sys, httpx\n"
        "os.nice(19)\n"
        "body = sys.stdin.buffer.read()\n"
        "headers = {'content-type': 'application/json'}\n"
        "with httpx.Client(timeout=120) as client:\n"
        "    with client.stream('POST', sys.argv[1], content=body, headers=headers) as r:\n"
        "        size = sum(len(chunk) for chunk in r.iter_bytes())\n"
        "print(r.status_code, size)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", reader, url], input=body, capture_output=True, check=True
    )
    status, size = done.stdout.split()
    return int(status), int(size)


if __name__ == "__main__":
    _probe(int(sys.argv[1]))
