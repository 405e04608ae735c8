"""A client of the HTTP/1.1 wire that shares no code with the server: requests are written
as raw bytes and answers are parsed by h11, so a framing mistake of the server (a wrong
Content-Length, a missing last chunk, a body after a HEAD answer) fails the parse."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import h11
import httpx

from tests.support.metrics import RUNNING, scrape
from tests.support.server import SimServer

CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """One parsed answer."""

    status: int
    headers: list[tuple[bytes, bytes]]  # names in lower case, in the order sent
    body: bytes
    informational: tuple[int, ...] = ()  # the 1xx statuses that came before it

    def header(self, name: str) -> bytes | None:
        found = self.values(name)
        return found[0] if found else None

    def values(self, name: str) -> list[bytes]:
        key = name.lower().encode()
        return [value for header, value in self.headers if header == key]

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def closes(self) -> bool:
        value = self.header("connection")
        return value is not None and b"close" in value.lower()


def chat_body(max_tokens: int = 5, stream: bool = False, **extra: Any) -> bytes:
    payload = {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "stream": stream,
        **extra,
    }
    return json.dumps(payload).encode()


def request(
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes | None = None,
    close: bool = False,
    version: str = "1.1",
) -> bytes:
    """The bytes of one request: a Host header, then `headers`, Content-Length for a body,
    `Connection: close` if asked."""
    lines = [f"{method} {target} HTTP/{version}", "Host: test"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def chat_request(max_tokens: int = 5, stream: bool = False, close: bool = False) -> bytes:
    return request(
        "POST",
        CHAT,
        [("Content-Type", "application/json")],
        chat_body(max_tokens, stream),
        close=close,
    )


def connect(sim: SimServer, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection((sim.host, sim.port), timeout=timeout)


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection. A reset after some
    bytes ends the read too; no close within `timeout` fails the test."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError as exc:
        raise AssertionError(
            f"the server did not close the connection; got {data[:300]!r}"
        ) from exc
    return data


def read_until(sock: socket.socket, marker: bytes, timeout: float = 10.0) -> bytes:
    """What the server sends up to and including the first `marker` (maybe a little more)."""
    sock.settimeout(timeout)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before {marker!r}; got {data[:300]!r}"
        data += chunk
    return data


def exchange(sim: SimServer, data: bytes, timeout: float = 10.0) -> bytes:
    """Sends `data` on a new connection, returns all the server sent until it closed."""
    with connect(sim, timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        return read_until_closed(sock, timeout)


def closed_by_peer(sock: socket.socket, timeout: float) -> tuple[bool, bytes, float]:
    """Waits up to `timeout` for the server to close; (closed, bytes received, seconds)."""
    start = time.monotonic()
    data = b""
    while True:
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            return False, data, time.monotonic() - start
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return False, data, time.monotonic() - start
        except ConnectionResetError:
            return True, data, time.monotonic() - start
        if not chunk:
            return True, data, time.monotonic() - start
        data += chunk


def _reply(head: h11.Response, body: bytes, informational: Sequence[int] = ()) -> Reply:
    headers = [(bytes(name).lower(), bytes(value)) for name, value in head.headers.raw_items()]
    return Reply(head.status_code, headers, body, tuple(informational))


def read_reply(conn: h11.Connection, more: Callable[[], bytes] | None = None) -> Reply:
    """The next whole answer on `conn`; `more` reads further bytes when h11 needs them (None:
    everything has been received already)."""
    informational: list[int] = []
    head: h11.Response | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA and more is not None:
            conn.receive_data(more())
        elif isinstance(event, h11.InformationalResponse):
            informational.append(event.status_code)
        elif isinstance(event, h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
        else:
            raise AssertionError(f"answer incomplete: {event!r}")
    assert head is not None
    return _reply(head, body, informational)


def parse(data: bytes, methods: Sequence[str]) -> list[Reply]:
    """The answers in `data` to requests made with `methods`, in order (only HEAD changes
    how an answer is framed); nothing may follow the last one."""
    assert data, "the server closed the connection without answering"
    conn = h11.Connection(h11.CLIENT)
    conn.receive_data(data)
    conn.receive_data(b"")  # the server closed: an answer framed by the close ends here
    replies: list[Reply] = []
    for index, method in enumerate(methods):
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "test")]))
        conn.send(h11.EndOfMessage())
        replies.append(read_reply(conn))
        if index + 1 < len(methods):
            assert conn.their_state is h11.DONE, f"answer {index} closes the connection"
            conn.start_next_cycle()
    leftover, _ = conn.trailing_data
    assert leftover == b"", f"bytes after the last answer: {leftover[:200]!r}"
    return replies


def parse_one(data: bytes, method: str = "GET") -> Reply:
    return parse(data, [method])[0]


class Client:
    """Requests one at a time on one kept-alive connection, answers parsed by h11."""

    def __init__(self, sim: SimServer, timeout: float = 10.0) -> None:
        self.sock = connect(sim, timeout)
        self.conn = h11.Connection(h11.CLIENT)

    def send(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> Reply:
        all_headers = [("Host", "test"), *headers]
        if method == "POST":
            all_headers.append(("Content-Length", str(len(body))))
        out = self.conn.send(h11.Request(method=method, target=target, headers=all_headers))
        assert out is not None
        if body:
            data = self.conn.send(h11.Data(data=body))
            assert data is not None
            out += data
        end = self.conn.send(h11.EndOfMessage())
        assert end is not None
        self.sock.sendall(out + end)
        reply = read_reply(self.conn, lambda: self.sock.recv(65536))
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        return reply

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def assert_json_error(reply: Reply, status: int) -> dict[str, Any]:
    """An answer in the OpenAI error shape with `status`, closing the connection."""
    assert reply.status == status, reply
    assert reply.header("content-type") == b"application/json", reply
    assert reply.closes, reply.headers
    error: dict[str, Any] = reply.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}, error
    assert error["code"] == status, error
    assert isinstance(error["message"], str) and error["message"], error
    return error


def rss_mb(pid: int) -> float:
    """The resident memory of a process, in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


def pid_of(sim: SimServer) -> int:
    assert sim.process is not None
    return sim.process.pid


def running(sim: SimServer) -> float:
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        return scrape(client).value(RUNNING)


def wait_running(sim: SimServer, value: float, timeout: float) -> float:
    """Seconds until vllm:num_requests_running reads `value`; fails after `timeout`."""
    start = time.monotonic()
    while True:
        seen = running(sim)
        if seen == value:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, f"running stayed {seen}, not {value}"
        time.sleep(0.02)


def health_within(sim: SimServer, timeout: float) -> Reply:
    """GET /health on a new connection, answered in full within `timeout` seconds."""
    start = time.monotonic()
    reply = parse_one(exchange(sim, request("GET", "/health", close=True), timeout))
    assert time.monotonic() - start < timeout
    return reply


def readable(sock: socket.socket) -> bool:
    ready, _, _ = select.select([sock], [], [], 0)
    return bool(ready)
