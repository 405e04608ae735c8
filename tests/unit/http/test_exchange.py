"""One request's exchange, written through a recording link: a complete answer's framing
(in one write up to 16 KiB, head and body apart past it), HEAD answers without a body,
HTTP/1.0 streams unframed and closing, and no request answered twice."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

import pytest

from vllm_sim.http.exchange import Cycle
from vllm_sim.http.messages import READY, BodyWriter, Response, StreamingResponse


class Link:
    def __init__(self) -> None:
        self.open = True
        self.port = 8000
        self.loop = cast(asyncio.AbstractEventLoop, None)  # no body is waited for here
        self.writes: list[bytes | tuple[bytes, ...]] = []

    def date(self) -> bytes:
        return b"date: now\r\n"

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def write_all(self, pieces: tuple[bytes, ...]) -> None:
        self.writes.append(pieces)

    def write_chunk(self, data: bytes) -> Awaitable[None]:
        self.writes.append(b"%x\r\n%b\r\n" % (len(data), data))
        return READY

    def write_plain(self, data: bytes) -> Awaitable[None]:
        self.writes.append(data)
        return READY

    def write_discarding(self, data: bytes) -> Awaitable[None]:
        return READY

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


def cycle(method: str = "GET", version: str = "1.1") -> tuple[Cycle, Link]:
    link = Link()
    made = Cycle(link, 0.0)
    made.method, made.version = method, version
    made.body_arrived()
    return made, link


def test_a_small_answer_is_one_write_and_a_large_one_keeps_its_body_apart() -> None:
    small, link = cycle()
    assert small.respond(Response(200, b"hi"), []) == 2
    [written] = link.writes
    assert isinstance(written, bytes) and written.endswith(b"\r\n\r\nhi")
    assert b"content-length: 2\r\n" in written and b"date: now\r\n" in written
    large, link = cycle()
    body = b"x" * (16 * 1024 + 1)
    large.respond(Response(200, body), [])
    [pieces] = link.writes
    assert isinstance(pieces, tuple)
    head, sent = pieces
    assert sent is body and head.endswith(b"\r\n\r\n")


def test_a_head_request_gets_the_length_but_no_body() -> None:
    head, link = cycle("HEAD")
    assert head.respond(Response(200, b"hello"), []) == 5
    [written] = link.writes
    assert isinstance(written, bytes)
    assert written.endswith(b"\r\n\r\n") and b"content-length: 5" in written


def test_an_http_1_0_stream_is_unframed_and_closes() -> None:
    async def produce(write: BodyWriter) -> None:
        await write(b"data: 1\n\n")

    stream, link = cycle(version="1.0")
    asyncio.run(stream.stream(StreamingResponse(produce), []))
    head, piece = link.writes
    assert isinstance(head, bytes) and b"transfer-encoding" not in head
    assert b"connection: close" in head and piece == b"data: 1\n\n" and stream.close_after


def test_a_request_is_answered_once() -> None:
    once, _ = cycle()
    once.respond(Response(200, b""), [])
    with pytest.raises(RuntimeError):
        once.respond(Response(200, b""), [])
