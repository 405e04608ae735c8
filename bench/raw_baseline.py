"""The raw-protocol baseline: the same answers as bench.baseline, with no ASGI and no uvicorn.

`python -m bench.raw_baseline --model M --port P` serves, on uvloop, an asyncio Protocol
that parses with `httptools` and writes precomputed bytes to the transport: POST
/v1/chat/completions decodes `stream` and `max_tokens` with msgspec and answers a chat
completion, or a zero-latency SSE stream (chunked) in one write; GET /health answers 200;
keep-alive throughout. It is the ceiling an HTTP layer of our own could reach on this
machine: what a request costs when nothing but parsing and one write stands between the
socket and a ready answer.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import httptools
import msgspec
import uvloop

from bench.baseline import CHAT_PATH, Ask, Events, completion_body

_CHAT = CHAT_PATH.encode()
_HEALTH = b"/health"


def _response(status: bytes, headers: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\n" + headers + b"content-length: %d\r\n\r\n" % len(body) + body
    )


class _Answers:
    """Every answer of the baseline, as the bytes written to the socket."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.completion = _response(
            b"200 OK", b"content-type: application/json\r\n", completion_body(model)
        )
        self.health = _response(b"200 OK", b"", b"")
        self.missing = _response(b"404 Not Found", b"", b"")
        self.streams: dict[int, bytes] = {}

    def stream(self, tokens: int) -> bytes:
        whole = self.streams.get(tokens)
        if whole is None:
            events = Events(self.model, tokens)
            body = events.opening + b"".join(events.tokens) + events.closing
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            whole = self.streams[tokens] = head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
        return whole


class RawProtocol(asyncio.Protocol):
    """One connection: requests parsed as they arrive, each answered in one write."""

    def __init__(self, answers: _Answers, decoder: msgspec.json.Decoder[Ask]) -> None:
        self._answers = answers
        self._decoder = decoder
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self._url = url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        url, body = self._url, b"".join(self._body)
        self._url, self._body = b"", []
        if self._transport is not None:
            self._transport.write(self._answer(url, body))

    def _answer(self, url: bytes, body: bytes) -> bytes:
        method = self._parser.get_method()
        if url == _CHAT and method == b"POST":
            ask = self._decoder.decode(body)
            return self._answers.stream(ask.max_tokens) if ask.stream else self._answers.completion
        return self._answers.health if url == _HEALTH else self._answers.missing


async def serve(model: str, port: int) -> None:
    answers = _Answers(model)
    decoder = msgspec.json.Decoder(Ask)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: RawProtocol(answers, decoder), "127.0.0.1", port, backlog=4096
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.raw_baseline", description=__doc__)
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--port", type=int, required=True)
    args: Any = parser.parse_args(argv)
    uvloop.run(serve(args.model, args.port))


if __name__ == "__main__":
    main()
