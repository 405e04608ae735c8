"""One server-sent-events driver for every protocol: protocols differ only in framing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import msgspec

from vllm_sim.api.errors import as_request_error
from vllm_sim.api.usage import usage_of
from vllm_sim.engine.errors import RequestAborted
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.http.messages import BodyWriter, HttpRequest, error_body

L = TypeVar("L")


class ChunkEncoder(Protocol):
    """How one protocol frames the life of each choice as SSE events."""

    def opening(self, seq: Sequence) -> bytes:
        """Sent once per choice, just before its first token (chat: the role chunk)."""

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        """One event per token in [start, end)."""

    def finish(self, seq: Sequence) -> bytes:
        """Sent once per choice when it finishes."""

    def closing(self, stream: RequestStream) -> bytes:
        """Sent once at the end of a successful stream (usage, [DONE])."""

    def error(self, error: RequestError) -> bytes:
        """Sent instead of the closing when the request fails after the stream began."""


def error_event(error: RequestError) -> bytes:
    return b"data: " + error_body(error) + b"\n\ndata: [DONE]\n\n"


class OpenAIStreamErrors:
    """The error event of OpenAI-style streams: the error body, then [DONE]."""

    def error(self, error: RequestError) -> bytes:
        return error_event(error)


class OpenAIChunks(OpenAIStreamErrors):
    """What chat and completion chunks share: one choice per chunk, spliced from bytes
    precomputed per request around each token, then the usage chunk and [DONE]."""

    OBJECT = ""  # the chunks' `object`
    BODY_KEY = b""  # the key of a chunk's payload: `"delta"` or `"text"`

    def __init__(
        self, stream: RequestStream, rid: str, model: str, top: int, include_usage: bool
    ) -> None:
        self._rid = rid
        self._model = model
        self._created = int(stream.request.arrival_time)
        self._top = top
        self._include_usage = include_usage
        self._head = (
            b'data: {"id":'
            + json_str(rid)
            + b',"object":'
            + json_str(self.OBJECT)
            + b',"created":'
            + str(self._created).encode()
            + b',"model":'
            + json_str(model)
            + b',"choices":[{"index":'
        )

    def _chunk(self, seq: Sequence, body: bytes, logprobs: bytes, finish: bytes) -> bytes:
        return (
            self._head
            + str(seq.index).encode()
            + b","
            + self.BODY_KEY
            + b":"
            + body
            + b',"logprobs":'
            + logprobs
            + b',"finish_reason":'
            + finish
            + b'}],"usage":null}\n\n'
        )

    def closing(self, stream: RequestStream) -> bytes:
        """The optional usage chunk (no choices), then [DONE]."""
        if not self._include_usage:
            return b"data: [DONE]\n\n"
        chunk = openai_object(stream, self._rid, self.OBJECT, self._model, [])
        return b"data: " + _encode(chunk) + b"\n\ndata: [DONE]\n\n"


def named_event(name: str, payload: object) -> bytes:
    """`event: <name>` framing, as the Responses and Anthropic streams use."""
    return b"event: " + name.encode() + b"\ndata: " + _encode(payload) + b"\n\n"


def sse_events(
    stream: RequestStream, request: HttpRequest, encoder: ChunkEncoder
) -> Callable[[BodyWriter], Awaitable[None]]:
    """The body producer of a streamed request (see StreamingResponse)."""

    def produce(write: BodyWriter) -> Awaitable[None]:
        return _write_events(stream, request, encoder, write)

    return produce


# Token events encoded per write. A request's tokens may all be due at once (zero
# inter-token latency, n in the hundreds): written in slices, with the loop yielded between
# them, they neither block other clients nor pile up in memory ahead of a slow reader.
TOKENS_PER_WRITE = 256


async def _write_events(
    stream: RequestStream, request: HttpRequest, encoder: ChunkEncoder, write: BodyWriter
) -> None:
    """Writes a request's tokens as they are released, until it ends or the client leaves.

    This loop runs once per released token of every stream, so it waits on the stream's
    future directly rather than through helpers: each extra layer costs every token.
    """
    sequences = stream.sequences
    opened = [False] * len(sequences)
    closed = [False] * len(sequences)
    stop_watching = None
    try:
        while True:
            if not stream.has_news():
                if stop_watching is None:
                    stop_watching = request.on_disconnect(stream.abort)
                await stream.notification()
                continue
            parts: list[bytes] = []
            room = TOKENS_PER_WRITE
            for i, seq in enumerate(sequences):
                if not closed[i]:
                    room = _encode_news(seq, i, encoder, opened, closed, parts, room)
                    if room <= 0:
                        break
            error = stream.error
            if isinstance(error, RequestAborted):
                return
            if error is not None:
                parts.append(encoder.error(as_request_error(error)))
            elif room <= 0:
                await write(b"".join(parts))
                await asyncio.sleep(0)
                continue
            elif stream.done:
                parts.append(encoder.closing(stream))
            if parts:
                await write(b"".join(parts))
            if stream.done:
                return
    finally:
        if stop_watching is not None:
            stop_watching()
        stream.abort()  # a no-op once the stream is done


def _encode_news(
    seq: Sequence,
    i: int,
    encoder: ChunkEncoder,
    opened: list[bool],
    closed: list[bool],
    parts: list[bytes],
    room: int,
) -> int:
    """Encodes up to `room` new tokens of `seq` (and its end, once all are sent); returns
    the room left."""
    emitted = seq.emitted
    if emitted > seq.sent or seq.finished:
        if not opened[i]:
            opened[i] = True
            parts.append(encoder.opening(seq))
        if emitted > seq.sent:
            end = min(emitted, seq.sent + room)
            parts.append(encoder.tokens(seq, seq.sent, end))
            room -= end - seq.sent
            seq.sent = end
    if seq.finished and seq.sent >= seq.emitted:
        closed[i] = True
        parts.append(encoder.finish(seq))
    return room


_encode = msgspec.json.encode


def json_str(text: str) -> bytes:
    """A JSON string literal (with quotes), for splicing into precomputed chunks."""
    return _encode(text)


def encoded_choices(
    stream: RequestStream, choice: Callable[[Sequence, L], dict[str, Any]], how: L
) -> list[Any]:
    """`choice(seq, how)` of each sequence, each encoded on its own: an answer too large
    for the event loop is built on a thread, and one encode of all of it would hold the
    GIL throughout."""
    sequences = stream.sequences
    if len(sequences) == 1:
        return [choice(sequences[0], how)]  # nothing to split: encoded with the answer
    return [msgspec.Raw(_encode(choice(seq, how))) for seq in sequences]


def openai_object(
    stream: RequestStream, rid: str, obj: str, model: str, choices: list[Any]
) -> dict[str, Any]:
    """A chat or text completion (or their final usage chunk) with the request's usage."""
    return {
        "id": rid,
        "object": obj,
        "created": int(stream.request.arrival_time),
        "model": model,
        "choices": choices,
        "usage": usage_of(stream.sequences).openai_json(),
    }
