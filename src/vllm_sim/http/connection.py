"""One client connection: HTTP/1.1 parsed by httptools, answered with pre-framed bytes.

Requests on a connection are answered one at a time in the order they came (pipelining);
while one is being answered, at most one more is read ahead before reading pauses, so a
client that pipelines without end costs one request's memory. What a request may hold is
bounded before it is kept: its head by ConnectionLimits (431 past them), its body by the
application's limit (413), and the time it may take to arrive by the server's timeouts
(408). A client that stops reading pauses the streams written to it at the transport's
high-water mark. A connection that closes aborts the request it carried at once.

An answer given before its request was all read closes the connection, lingering: the
server ends its side, then reads and drops what the client still sends, for a bounded
time and number of bytes, so that the client gets to read the answer (a socket closed
with unread input resets the connection, and a reset can destroy an answer not read yet).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast
from urllib.parse import unquote

import httptools

from vllm_sim.http import wire
from vllm_sim.http.exchange import ClientGone, Cycle
from vllm_sim.http.limits import Phase
from vllm_sim.http.messages import READY, declared_length, header_fields
from vllm_sim.http.splice import Splice, preface_state
from vllm_sim.http.state import ServerState, access_log, log


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the limits."""


class HttpConnection(asyncio.Protocol):
    """The protocol of one connection (see the module's docstring)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.loop = state.loop
        self.limits = state.limits
        self.port = state.port
        self.transport: asyncio.Transport | None = None
        self.open = False  # connected, and not being closed: writes go out
        self.since = time.monotonic()  # when the current phase began, for timeouts
        self.phase = Phase.IDLE
        self.served = 0  # requests answered so far
        self._parser = httptools.HttpRequestParser(self)
        self._reading: Cycle | None = None  # the request the parser is filling in
        self._queue: deque[Cycle] = deque()  # read, waiting for the one being answered
        self._active: Cycle | None = None  # the request being answered
        self._head_bytes = 0
        self._raw_head_bytes = 0
        self._header_count = 0
        self._url = b""
        self._head_too_large = False
        self._read_paused = False
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._watcher: Callable[[], None] | None = None
        self._closing = False  # close once the active request is answered
        self._pending_error: bytes | None = None  # answered once the active request is
        self._upgrade_body = 0  # body bytes of an upgrade request still to read
        self._linger_left = 0  # bytes still dropped before a lingering close gives up
        self._last_read = False  # a request that closes the connection has been read
        # Its first bytes are looked at for the HTTP/2 preface while a gRPC server shares
        # the port; what arrived of a preface so far.
        self._sniffing = state.grpc_target is not None
        self._sniffed = b""

    # -- transport events --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.open = True
        self.state.connection_opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self.state.connection_closed(self)
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher()
        for cycle in (self._reading, self._active):
            if cycle is not None:
                cycle.wake()  # a handler waiting for its body learns of the loss
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # a client that closes its side is gone: close ours too

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        drained = self._drained
        if drained is not None:
            self._drained = None
            if not drained.done():
                drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._sniffing:
            data = self._sniffed + data
            state = preface_state(data)
            if state is None:  # a start of the preface: the next bytes decide
                self._sniffed = data
                return
            self._sniffing, self._sniffed = False, b""
            if state:
                self._hand_over(data)
                return
        if self._upgrade_body:
            self._read_upgrade_body(data)
            return
        if self.phase is Phase.HEAD:
            # Raw bytes of a head still arriving, apart from the exact count of its complete
            # lines (on_url, on_header): only this sees a line that never ends. Added to
            # that count, a line split over two reads would be counted twice.
            self._raw_head_bytes += len(data)
        elif self.phase is Phase.BODY:
            self.since = time.monotonic()  # the body made progress
        elif self.phase is Phase.LINGER:
            self._drop(data)
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._upgrade_requested(data[upgrade.args[0] :] if upgrade.args else b"")
        except (httptools.HttpParserError, httptools.HttpParserCallbackError) as exc:
            self._parse_failed(exc)
            return
        if self.phase is Phase.HEAD and self._raw_head_bytes > self.limits.max_head_bytes:
            # A header line that never ends is never handed to on_header: counted here.
            self._head_too_large = True
            self._parse_failed(None)
            return
        reading = self._reading
        if (
            reading is not None
            and self.phase is Phase.BODY
            and self._active is None
            and not self._last_read
        ):
            self._start(reading)  # its body is on its way: the handler reads it as it comes

    # -- parser callbacks --

    def on_message_begin(self) -> None:
        now = time.monotonic()
        self._reading = Cycle(self, now)
        self.phase = Phase.HEAD
        self.since = now
        self._head_bytes = 0
        self._raw_head_bytes = 0
        self._header_count = 0
        self._url = b""

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count(len(url), 0)

    def on_header(self, name: bytes, value: bytes) -> None:
        # Counted inline: this runs for every header line of every request.
        self._head_bytes += len(name) + len(value)
        self._header_count += 1
        limits = self.limits
        if self._head_bytes > limits.max_head_bytes or self._header_count > limits.max_headers:
            self._head_too_large = True
            raise _HeadTooLarge
        cycle = self._reading
        if cycle is not None:
            name = name.lower()
            if name == b"expect" and value.lower() == b"100-continue":
                cycle.expects_continue = True
            cycle.headers.append((name, value))

    def on_headers_complete(self) -> None:
        cycle = self._reading
        if cycle is None:
            return
        parser = self._parser
        cycle.method = parser.get_method().decode("ascii")
        cycle.version = parser.get_http_version()
        url = httptools.parse_url(self._url)
        path = url.path.decode("latin-1")
        cycle.path = unquote(path) if "%" in path else path
        # httptools' stub declares bytes, but a URL without a query has None: read untyped,
        # so that compiled code does not check it as bytes.
        query: bytes | None = getattr(url, "query", None)
        cycle.query = b"" if query is None else query
        cycle.close_after = not parser.should_keep_alive() or self.state.closing
        if parser.should_upgrade():
            # Nothing here speaks another protocol: the request is answered as HTTP/1.1,
            # then the connection closes. The parser hands over at the end of the head,
            # so a body it declares is read here.
            cycle.close_after = True
            self._upgrade_body = declared_length(header_fields(cycle.headers))
        self.phase = Phase.BODY
        self.since = time.monotonic()

    def on_body(self, body: bytes) -> None:
        cycle = self._reading
        if cycle is not None:
            cycle.add_body(body, self.state.max_body_bytes)

    def on_message_complete(self) -> None:
        if self._upgrade_body:
            return  # the body of an upgrade request comes after the parser stopped
        cycle = self._reading
        self._reading = None
        self.phase = Phase.IDLE
        self.since = time.monotonic()
        if cycle is None or self._last_read:
            return  # nothing after a request that closes the connection is answered
        if cycle.close_after:
            # Reading goes on (a client that leaves must still be noticed); what follows
            # is parsed and dropped.
            self._last_read = True
        cycle.body_arrived()
        if cycle is self._active:
            return  # started while its body was on its way
        if self._active is None and not self._queue:
            self._start(cycle)
            return
        self._queue.append(cycle)
        # One request read ahead is enough: the rest waits in the socket.
        self._pause_reading()

    def _count(self, size: int, headers: int) -> None:
        self._head_bytes += size
        self._header_count += headers
        limits = self.limits
        if self._head_bytes > limits.max_head_bytes or self._header_count > limits.max_headers:
            self._head_too_large = True
            raise _HeadTooLarge

    # -- answering --

    def _start(self, cycle: Cycle) -> None:
        """Runs the request's handler at once, up to its first wait. A request the engine
        answers without waiting (no latency) is answered here, with no task at all; one
        that waits goes on in a task from where it stopped."""
        if not self.open:
            return  # read in the same buffer as a request whose answer closed the connection
        self._active = cycle
        coroutine = self._serve(cycle)
        try:
            awaited = coroutine.send(None)
        except StopIteration:
            return
        _continue_later(self.loop, coroutine, awaited)

    async def _serve(self, cycle: Cycle) -> None:
        try:
            await self.state.app(cycle)
        except ClientGone:
            pass
        except Exception:  # the application answers its own errors: this is a bug
            log.exception("unhandled error serving %s %s", cycle.method, cycle.path)
            if not cycle.responded:
                self.write(self._error_answer(500, "Internal server error"))
            cycle.close_after = True
        if not cycle.responded:
            cycle.close_after = True
        self._finished(cycle)

    def _finished(self, cycle: Cycle) -> None:
        self._active = None
        self._watcher = None
        self.served += 1
        if self.state.log_access:
            self._log_access(cycle)
        if not self.open:
            return
        if self._closing or (cycle.close_after and cycle.complete):
            self._close()
            return
        if cycle.close_after:  # answered before its body was all read
            self._linger()
            return
        if self._pending_error is not None:
            self.write(self._pending_error)
            self._linger()
            return
        self.since = time.monotonic()
        if self._queue:
            self._start(self._queue.popleft())
        elif self._reading is not None and self.phase is Phase.BODY:
            self._start(self._reading)  # read ahead, its body still arriving
        if self._read_paused and not self._queue and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()

    def _log_access(self, cycle: Cycle) -> None:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "-"
        target = cycle.path + ("?" + cycle.query.decode("latin-1") if cycle.query else "")
        access_log.info(
            '%s - "%s %s HTTP/%s" %d', client, cycle.method, target, cycle.version, cycle.status
        )

    # -- writing --

    def write(self, data: bytes) -> None:
        if self.open:
            cast(asyncio.Transport, self.transport).write(data)

    def write_all(self, pieces: tuple[bytes, ...]) -> None:
        if self.open:
            cast(asyncio.Transport, self.transport).writelines(pieces)

    def write_chunk(self, data: bytes) -> Awaitable[None]:
        """One piece of a streamed body; waits only while the client is not reading."""
        if not self.open:
            return READY
        if data:  # framed inline: this runs once per streamed token
            cast(asyncio.Transport, self.transport).write(b"%x\r\n%b\r\n" % (len(data), data))
        if self._write_paused:
            return self._drain()
        return READY

    def write_plain(self, data: bytes) -> Awaitable[None]:
        """A piece of a streamed body with no framing (an HTTP/1.0 client's)."""
        if not self.open:
            return READY
        if data:
            cast(asyncio.Transport, self.transport).write(data)
        if self._write_paused:
            return self._drain()
        return READY

    def write_discarding(self, data: bytes) -> Awaitable[None]:
        return READY  # a HEAD request's stream: the body is not sent

    def _drain(self) -> asyncio.Future[None]:
        drained = self._drained
        if drained is None:
            drained = self._drained = self.loop.create_future()
        return drained

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        if not self.open:
            self.loop.call_soon(callback)
            return _nothing
        self._watcher = callback

        def stop() -> None:
            if self._watcher is callback:
                self._watcher = None

        return stop

    # -- errors and closing --

    def _hand_over(self, data: bytes) -> None:
        """An HTTP/2 connection: from now on the gRPC server's (see splice.py)."""
        transport, target = self.transport, self.state.grpc_target
        assert transport is not None and target is not None
        self.open = False
        splice = Splice(transport, data, target, self.state.splice_closed)
        transport.set_protocol(splice)
        self.state.connection_handed_over(self, splice)

    def _parse_failed(self, exc: Exception | None) -> None:
        if self._head_too_large:
            limits = self.limits
            message = (
                f"The request head is over {limits.max_head_bytes} bytes or "
                f"{limits.max_headers} header lines"
            )
            answer = self._error_answer(431, message)
        else:
            reason = str(exc) if exc is not None else "malformed request"
            answer = self._error_answer(400, f"Invalid HTTP request: {reason}")
        self._reading = None
        self._fail(answer)

    def _fail(self, answer: bytes) -> None:
        """Answers `answer` once the request being answered (if any) is, then closes."""
        self._pause_reading()
        if self._active is not None:
            self._pending_error = answer
            return
        self.write(answer)
        self._linger()

    def _upgrade_requested(self, rest: bytes) -> None:
        """A request asking to switch protocols is answered as plain HTTP/1.1 (nothing
        here speaks another), and the connection closes after it: what follows its head
        and body belongs to a protocol that was never agreed."""
        if self._upgrade_body:
            self._read_upgrade_body(rest)
            return
        cycle = self._reading
        if cycle is not None:
            cycle.close_after = True
            self.on_message_complete()
        else:  # its head ended the message: it is the last request read
            last = self._queue[-1] if self._queue else self._active
            if last is not None:
                last.close_after = True
            else:  # and it has been answered already
                self._close()
        self._pause_reading()

    def _read_upgrade_body(self, data: bytes) -> None:
        cycle = self._reading
        if cycle is None:
            self._upgrade_body = 0
            return
        self.since = time.monotonic()
        piece = data[: self._upgrade_body]
        self._upgrade_body -= len(piece)
        if piece:
            cycle.add_body(piece, self.state.max_body_bytes)
        if self._upgrade_body == 0:
            self.on_message_complete()
        elif self._active is None:
            self._start(cycle)  # its handler reads the body as it comes

    def timed_out(self, now: float) -> bool:
        """Closes the connection if its current phase has lasted too long; True if so."""
        if self.phase is Phase.LINGER:
            if now - self.since > self.limits.linger_timeout:
                self._close()
                return True
            return False
        if not self.open:
            return False
        active = self._active
        if active is not None and not (self.phase is Phase.BODY and active is self._reading):
            return False  # a request is being answered: its time is the engine's
        limits = self.limits
        elapsed = now - self.since
        if self.phase is Phase.IDLE:
            limit = limits.keep_alive_timeout if self.served else limits.head_timeout
            if elapsed > limit:
                self._close()
                return True
            return False
        limit = limits.head_timeout if self.phase is Phase.HEAD else limits.body_timeout
        if elapsed <= limit:
            return False
        what = "head" if self.phase is Phase.HEAD else "body"
        message = f"The request {what} did not arrive within {limit:g} seconds"
        answer = self._error_answer(408, message)
        self._reading = None
        if active is not None:  # its handler waits for the body: it is told it never came
            if not active.responded:
                active.responded = True
                self.write(answer)
            self._linger()
            active.wake()
        else:
            self._fail(answer)
        return True

    def is_idle(self) -> bool:
        """Whether closing it now would cut no answer: nothing is being answered, or the
        request is still waiting for its body and nothing of its answer was written."""
        if self.phase is Phase.LINGER:
            return True  # answered, and closing
        if self._queue or not self.open:
            return False
        active = self._active
        return active is None or (
            active is self._reading and self.phase is Phase.BODY and not active.responded
        )

    def shutdown(self) -> None:
        """Closes now if nothing is being answered, else once the answer is written."""
        if self._active is None:
            self._close()
        else:
            self._closing = True

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _linger(self) -> None:
        """Closes after an answer given before its request was all read (see the module's
        docstring): this side ends once the answer is flushed, and what still arrives is
        dropped until the client ends its side or a bound in ConnectionLimits passes (the
        sweep enforces the time). A transport that cannot end one side only (TLS) closes
        at once, as it cannot tell the client the answer is complete."""
        transport = self.transport
        self.open = False
        if transport is None or transport.is_closing():
            return
        if not transport.can_write_eof():
            transport.close()
            return
        self.phase = Phase.LINGER
        self.since = time.monotonic()
        self._linger_left = self.limits.linger_bytes
        self._reading = None
        transport.write_eof()
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()

    def _drop(self, data: bytes) -> None:
        self._linger_left -= len(data)
        if self._linger_left < 0:
            self._close()

    def _close(self) -> None:
        self.open = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def date(self) -> bytes:
        return self.state.date.line()

    def _error_answer(self, status: int, message: str) -> bytes:
        return wire.protocol_error(status, message, self.date(), self.state.dialect)


def _nothing() -> None:
    return None


def _continue_later(
    loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, None], awaited: object
) -> None:
    """Hands a coroutine that stopped at an await over to a task, as asyncio's own eager
    tasks do: a future it waits on resumes it through the task once done (the task's first
    step then finds it done); anything else (a bare yield) resumes it on the next turn."""
    if isinstance(awaited, asyncio.Future) and awaited._asyncio_future_blocking:
        awaited._asyncio_future_blocking = False

        def resume(_: object) -> None:
            loop.create_task(coroutine)

        awaited.add_done_callback(resume)
    else:
        loop.create_task(coroutine)
