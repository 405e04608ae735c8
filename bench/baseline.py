"""The baseline: a bare ASGI app on the simulator's server stack, answering the same route.

`python -m bench.baseline --model M --port P [--ttft-ms T --itl-ms I] [--one-write]` runs it
on uvicorn with the simulator's settings (uvloop, httptools, no lifespan, no access log).
POST /v1/chat/completions decodes `stream` and `max_tokens` with msgspec and answers with
precomputed bytes of the simulator's shape: a chat completion, or an SSE stream of one
role chunk, `max_tokens` content chunks, a finish chunk and `[DONE]`. With latency set it
keeps timing as naive as can be: one `asyncio.sleep` before the first token and one per
later token, per request. GET /health answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import uvicorn

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

CHAT_PATH = "/v1/chat/completions"
REQUEST_ID = "chatcmpl-2775bfc3-2598-5854-a6ce-1c572ba84142"
CREATED = 1795952254
WORDS = ("To ", "be ", "or ", "not ", "to ", "be, ", "that ", "is ", "the ", "question. ")
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class Ask(msgspec.Struct):
    """The two request fields the baseline acts on."""

    stream: bool = False
    max_tokens: int = 16


def completion_body(model: str) -> bytes:
    """A chat completion of the simulator's shape and size (about 340 bytes)."""
    return msgspec.json.encode(
        {
            "id": REQUEST_ID,
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "To be or not to be"},
                    "logprobs": None,
                    "finish_reason": "length",
                }
            ],
            "usage": {
                "prompt_tokens": 6,
                "completion_tokens": 6,
                "total_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
        }
    )


def sse_chunk(model: str, delta: object, finish: str | None) -> bytes:
    chunk = {
        "id": REQUEST_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": None,
    }
    return b"data: " + msgspec.json.encode(chunk) + b"\n\n"


class Events:
    """The SSE events of one stream: opening, content tokens, closing (finish + [DONE])."""

    def __init__(self, model: str, tokens: int) -> None:
        self.opening = sse_chunk(model, {"role": "assistant", "content": ""}, None)
        self.tokens = [
            sse_chunk(model, {"content": WORDS[i % len(WORDS)]}, None) for i in range(tokens)
        ]
        self.closing = sse_chunk(model, {}, "length") + b"data: [DONE]\n\n"


async def read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    more = True
    while more:
        message = await receive()
        parts.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(parts)


class BaselineApp:
    """The bare ASGI app; `one_write` sends a whole zero-latency stream in one message."""

    def __init__(self, model: str, ttft: float, itl: float, one_write: bool) -> None:
        self.model = model
        self.ttft = ttft
        self.itl = itl
        self.one_write = one_write
        self.body = completion_body(model)
        self.body_length = str(len(self.body)).encode()
        self.decoder = msgspec.json.Decoder(Ask)
        self.events: dict[int, Events] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == CHAT_PATH and scope["method"] == "POST":
            ask = self.decoder.decode(await read_body(receive))
            if ask.stream:
                await self.stream(send, self.events_for(ask.max_tokens))
            else:
                await self.complete(send)
            return
        status = 200 if scope["path"] == "/health" else 404
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def events_for(self, tokens: int) -> Events:
        events = self.events.get(tokens)
        if events is None:
            events = self.events[tokens] = Events(self.model, tokens)
        return events

    async def complete(self, send: Send) -> None:
        headers = [*JSON_HEADERS, (b"content-length", self.body_length)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})

    async def stream(self, send: Send, events: Events) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        if self.one_write:
            whole = events.opening + b"".join(events.tokens) + events.closing
            await send({"type": "http.response.body", "body": whole, "more_body": True})
        else:
            await self.timed_events(send, events)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def timed_events(self, send: Send, events: Events) -> None:
        """One message per event; with latency, one plain sleep before each token."""
        if self.ttft:
            await asyncio.sleep(self.ttft)
        await send({"type": "http.response.body", "body": events.opening, "more_body": True})
        for index, token in enumerate(events.tokens):
            if index and self.itl:
                await asyncio.sleep(self.itl)
            await send({"type": "http.response.body", "body": token, "more_body": True})
        await send({"type": "http.response.body", "body": events.closing, "more_body": True})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline", description=__doc__)
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--one-write", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    app = BaselineApp(args.model, args.ttft_ms / 1000, args.itl_ms / 1000, args.one_write)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        server_header=False,
        timeout_graceful_shutdown=5,
        backlog=4096,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
