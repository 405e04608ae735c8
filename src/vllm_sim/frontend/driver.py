"""The one token driver: it hands each request's tokens, as the engine releases them, to
the protocol's encoder and the transport's sink.

Protocols differ only in framing (SSE events of chat, completions, Responses, Messages;
gRPC's messages) and transports only in how an encoded piece leaves (a chunked HTTP body
write, a gRPC message write): the order of openings, tokens, finishes and the closing, the
interleaving of choices, the batching per write, the reaction to a client that stops
reading or leaves, and failures after the stream began are decided here once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from vllm_sim.engine.errors import EngineError, RequestAborted
from vllm_sim.engine.sequence import RequestStream, Sequence, WrittenReport
from vllm_sim.errors import RequestError
from vllm_sim.frontend.caller import Caller
from vllm_sim.frontend.errors import as_request_error, refusal_error

log = logging.getLogger("vllm_sim.server")

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class ChunkEncoder(Protocol[P_co]):
    """How one protocol frames the life of each choice, as pieces of type P."""

    def opening(self, seq: Sequence) -> P_co:
        """Sent once per choice, just before its first token (chat: the role chunk)."""
        ...

    def tokens(self, seq: Sequence, start: int, end: int) -> P_co:
        """The tokens [start, end) of a choice."""
        ...

    def finish(self, seq: Sequence) -> P_co:
        """Sent once per choice when it finishes."""
        ...

    def closing(self, stream: RequestStream) -> P_co:
        """Sent once at the end of a successful stream (usage, [DONE])."""
        ...

    def error(self, error: RequestError) -> P_co:
        """Sent instead of the closing when the request fails after the stream began (or
        raised, by a protocol that ends a failed call with a status instead)."""
        ...


# Hands the pieces encoded in one pass to the transport. None: taken at once, with room for
# more; otherwise what to await before writing again (the client is not reading), or, for a
# sink that writes only when awaited (drive's `written_when_awaited`), the write itself.
Sink = Callable[[list[P]], Awaitable[None] | None]

# Token events encoded per write. A request's tokens may all be due at once (zero
# inter-token latency, n in the hundreds): written in slices, with the loop yielded between
# them, they neither block other clients nor pile up in memory ahead of a slow reader.
TOKENS_PER_WRITE = 256


async def drive(
    stream: RequestStream,
    caller: Caller,
    encoder: ChunkEncoder[P],
    sink: Sink[P],
    push: bool = True,
    written_when_awaited: bool = False,
) -> None:
    """Writes a request's tokens as they are released, until it ends or the caller leaves.
    `push`: a one-choice stream is written from inside the engine's tick (see _Pusher),
    which pays where the sink usually takes a piece at once.

    Each write is reported to the stream's engine (RequestStream.report_written), which
    times it: when the sink has taken it, or once awaited where the sink writes only then
    (`written_when_awaited`, which a pushed stream's sink may not be).

    This loop runs once per released token of every stream, so it waits on the stream's
    future directly rather than through helpers: each extra layer costs every token.
    """
    sequences = stream.sequences
    opened = [False] * len(sequences)
    closed = [False] * len(sequences)
    reported = [False] * len(sequences)  # each choice's end, as told to the engine
    stop_watching = None
    one = len(sequences) == 1
    report = stream.report_written
    pusher = _Pusher(stream, encoder, sink, opened, closed, reported) if one and push else None
    try:
        while True:
            if not stream.has_news():
                if stop_watching is None:
                    stop_watching = caller.on_disconnect(stream.abort)
                if pusher is None:
                    await stream.notification()
                else:
                    await pusher.push_until_needed()
                    if pusher.blocked is not None:  # the client is not reading: wait for it
                        blocked, pusher.blocked = pusher.blocked, None
                        await blocked
                continue
            parts: list[P] = []
            room = TOKENS_PER_WRITE
            start = 0
            starts: list[int] | None = None
            if one:
                start = sequences[0].sent
                if not closed[0]:
                    room = _encode_news(sequences[0], 0, encoder, opened, closed, parts, room)
            else:
                if report is not None:
                    starts = [seq.sent for seq in sequences]
                room = _interleave(sequences, encoder, opened, closed, parts, room)
            error = stream.error
            if isinstance(error, RequestAborted):
                return
            sliced = False
            if error is not None:
                parts.append(encoder.error(as_request_error(error)))
            elif room <= 0:
                sliced = True  # more tokens than one write carries: the rest after a yield
            elif stream.done:
                parts.append(encoder.closing(stream))
            if parts:
                pending = sink(parts)
                if report is not None and not written_when_awaited:
                    _tell(report, sequences, start, starts, closed, reported)
                if pending is not None:
                    await pending
                if report is not None and written_when_awaited:
                    _tell(report, sequences, start, starts, closed, reported)
            if sliced:
                await asyncio.sleep(0)
                continue
            if stream.done:
                return
    finally:
        stream.listener = None
        if stop_watching is not None:
            stop_watching()
        if report is not None:
            # A choice that ended but whose end was never written (its client left, or a
            # write failed) ends for its client now.
            for i, seq in enumerate(sequences):
                if seq.finished and not reported[i]:
                    report(seq, seq.sent, seq.sent, True)
        stream.abort()  # a no-op once the stream is done
        stream.release()  # written out: nothing reads its sequences any more


def _tell(
    report: WrittenReport,
    sequences: list[Sequence],
    start: int,
    starts: list[int] | None,
    closed: list[bool],
    reported: list[bool],
) -> None:
    """Reports what one pass wrote: of its one choice (`start`: what was sent before the
    pass), or of each (`starts`)."""
    if starts is None:
        _tell_one(report, sequences[0], 0, start, closed, reported)
        return
    for i, seq in enumerate(sequences):
        _tell_one(report, seq, i, starts[i], closed, reported)


def _tell_one(
    report: WrittenReport,
    seq: Sequence,
    i: int,
    start: int,
    closed: list[bool],
    reported: list[bool],
) -> None:
    ended = closed[i] and not reported[i]
    if seq.sent > start or ended:
        if ended:
            reported[i] = True
        report(seq, start, seq.sent, ended)


def answer_written(stream: RequestStream) -> None:
    """A whole answer was just handed to its transport: each of its choices ended for its
    client now (its tokens were observed as the engine released them)."""
    report = stream.report_written
    if report is None:
        return
    for seq in stream.sequences:
        if seq.finished:
            report(seq, seq.emitted, seq.emitted, True)


async def wait_for_result(stream: RequestStream, caller: Caller) -> None:
    """Waits for a whole request that is not streamed; the caller leaving aborts it."""
    if not stream.done:
        stop_watching = caller.on_disconnect(stream.abort)
        try:
            await stream.wait_done()
        finally:
            stop_watching()
            stream.abort()
    error = stream.error
    if isinstance(error, EngineError):
        raise refusal_error(error)
    if error is not None:
        raise error


class _Pusher(Generic[P]):
    """Writes a one-choice stream's tokens as the engine releases them, from inside the
    engine's tick (RequestStream.listener): a token costs its encode and one sink call,
    and the tokens of one tick go out in that tick. It hands the stream back to its
    coroutine for everything else: the end, a failure, a client that stopped reading, or
    more tokens at once than one write should carry."""

    __slots__ = (
        "_closed",
        "_encoder",
        "_opened",
        "_reported",
        "_sink",
        "_stream",
        "_waiter",
        "blocked",
    )

    def __init__(
        self,
        stream: RequestStream,
        encoder: ChunkEncoder[P],
        sink: Sink[P],
        opened: list[bool],
        closed: list[bool],
        reported: list[bool],
    ) -> None:
        self._stream = stream
        self._encoder = encoder
        self._sink = sink
        self._opened = opened
        self._closed = closed
        self._reported = reported
        self._waiter: asyncio.Future[None] | None = None
        self.blocked: Awaitable[None] | None = None  # a write that must be awaited

    def push_until_needed(self) -> asyncio.Future[None]:
        """Pushes from now on; the future is done when the coroutine must take over."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self._stream.listener = self._on_news
        return waiter

    def _on_news(self) -> None:
        stream = self._stream
        if stream.done or self._closed[0]:
            self._hand_back()
            return
        parts: list[P] = []
        try:
            seq = stream.sequences[0]
            start = seq.sent
            room = _encode_news(
                seq, 0, self._encoder, self._opened, self._closed, parts, TOKENS_PER_WRITE
            )
            if parts:
                pending = self._sink(parts)
                report = stream.report_written
                if report is not None:  # taken by the transport (a pushed stream's sink)
                    _tell_one(report, seq, 0, start, self._closed, self._reported)
                if pending is not None:
                    self.blocked = pending
                    room = 0
        except Exception:  # never into the engine's tick: the coroutine meets it again
            log.exception("streaming a token failed")
            room = 0
        if room <= 0:
            self._hand_back()

    def _hand_back(self) -> None:
        self._stream.listener = None
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _interleave(
    sequences: list[Sequence],
    encoder: ChunkEncoder[P],
    opened: list[bool],
    closed: list[bool],
    parts: list[P],
    room: int,
) -> int:
    """The news of several choices as vLLM's steps send them: every choice's opening
    first, then one token of each choice in turn; returns the room left."""
    for i, seq in enumerate(sequences):
        if not opened[i] and (seq.emitted > seq.sent or seq.finished):
            opened[i] = True
            parts.append(encoder.opening(seq))
    while room > 0:
        written = len(parts)
        for i, seq in enumerate(sequences):
            if not closed[i]:
                room = _encode_news(seq, i, encoder, opened, closed, parts, room, 1)
                if room <= 0:
                    break
        if len(parts) == written:
            break
    return room


def _encode_news(
    seq: Sequence,
    i: int,
    encoder: ChunkEncoder[P],
    opened: list[bool],
    closed: list[bool],
    parts: list[P],
    room: int,
    most: int = TOKENS_PER_WRITE,
) -> int:
    """Encodes up to `most` (and `room`) new tokens of `seq`, and its end once all are
    sent; returns the room left."""
    emitted = seq.emitted
    if emitted > seq.sent or seq.finished:
        if not opened[i]:
            opened[i] = True
            parts.append(encoder.opening(seq))
        if emitted > seq.sent:
            end = min(emitted, seq.sent + min(room, most))
            parts.append(encoder.tokens(seq, seq.sent, end))
            room -= end - seq.sent
            seq.sent = end
    if seq.finished and seq.sent >= seq.emitted:
        closed[i] = True
        parts.append(encoder.finish(seq))
    return room
