"""The request-head limits of the HTTP protocol, driven with a fake transport on a real loop:
a head that does not complete in time is answered 408 and the connection closed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from vllm_sim.server.http_protocol import BoundedHttpToolsProtocol


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5555)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class QuickTimeout(BoundedHttpToolsProtocol):
    HEAD_TIMEOUT = 0.05


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _connect(loop: asyncio.AbstractEventLoop) -> tuple[QuickTimeout, FakeTransport]:
    config = uvicorn.Config(_app, http=QuickTimeout, lifespan="off")
    config.load()
    protocol = QuickTimeout(config, ServerState(), {}, loop)
    transport = FakeTransport()
    protocol.connection_made(transport)
    return protocol, transport


def _status_and_body(written: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = written.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_head_that_never_completes_is_answered_408() -> None:
    async def body() -> None:
        protocol, transport = _connect(asyncio.get_running_loop())
        protocol.data_received(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        await asyncio.sleep(0.2)
        assert transport.closed
        status, error = _status_and_body(transport.written)
        assert status == 408 and error["error"]["code"] == 408

    asyncio.run(body())


def test_a_connection_that_sends_nothing_is_closed() -> None:
    async def body() -> None:
        _, transport = _connect(asyncio.get_running_loop())
        await asyncio.sleep(0.2)
        assert transport.closed

    asyncio.run(body())


def test_a_complete_head_cancels_the_timer() -> None:
    async def body() -> None:
        protocol, transport = _connect(asyncio.get_running_loop())
        protocol.data_received(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.2)
        assert transport.written.startswith(b"HTTP/1.1 200")
        assert b"408" not in transport.written

    asyncio.run(body())
