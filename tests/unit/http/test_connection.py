"""The HTTP/1.1 connection driven byte by byte through a recording transport on a real
loop, with the clock of its timeouts handed in: framing, pipelining order, limits,
timeouts, flow control and the connection cap, each without a socket or a wait."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import h11
import pytest

from vllm_sim.http.connection import HttpConnection
from vllm_sim.http.exchange import Cycle
from vllm_sim.http.limits import ConnectionLimits, Phase
from vllm_sim.http.messages import READY, BodyTooLarge, Response, StreamingResponse
from vllm_sim.http.server import HttpServer
from vllm_sim.transports.http.conventions import OPENAI_DIALECT


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False
        self.aborted = False
        self.reading = True
        self.eof = False  # this side was ended (shutdown for writing), the other still read

    @property
    def ended(self) -> bool:
        """Whether the client has been told the connection ends (closed or half-closed)."""
        return self.closed or self.eof

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5555)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def writelines(self, pieces: Any) -> None:
        for piece in pieces:
            self.write(piece)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


Handler = Callable[[Cycle], Awaitable[None]]


async def echo(cycle: Cycle) -> None:
    """Answers with what it read: method, path, query and body."""
    try:
        body = await cycle.read_body()
    except BodyTooLarge:
        cycle.respond(Response(413, b"{}", headers=[(b"connection", b"close")]), [])
        return
    answer = {"method": cycle.method, "path": cycle.path, "query": cycle.query.decode()}
    answer["body"] = body.decode()
    cycle.respond(Response(200, json.dumps(answer).encode()), [])


def responses(data: bytes, head_request: bool = False) -> list[tuple[int, dict[str, str], bytes]]:
    """Every complete response in `data`, parsed by h11 (an independent implementation)."""
    client = h11.Connection(h11.CLIENT)
    found: list[tuple[int, dict[str, str], bytes]] = []
    if not data:
        return found  # (h11 reads empty data as the end of the connection)
    client.receive_data(data)
    while True:
        if client.our_state is h11.IDLE:
            method = b"HEAD" if head_request else b"GET"
            client.send(h11.Request(method=method, target="/", headers=[("host", "x")]))
            client.send(h11.EndOfMessage())
        event = client.next_event()
        if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
            return found
        if isinstance(event, h11.InformationalResponse):
            continue
        assert isinstance(event, h11.Response), event
        headers = {k.decode(): v.decode() for k, v in event.headers}
        body = b""
        while True:
            part = client.next_event()
            if isinstance(part, h11.Data):
                body += part.data
            elif isinstance(part, h11.EndOfMessage):
                break
            else:
                return found  # incomplete
        found.append((event.status_code, headers, body))
        if client.their_state is h11.MUST_CLOSE:
            return found
        client.start_next_cycle()


class Harness:
    def __init__(self, handler: Handler, limits: ConnectionLimits, max_body: int) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(self._server(handler, limits, max_body))
        self.transport = RecordingTransport()
        self.conn = HttpConnection(self.server.state)
        self.conn.connection_made(self.transport)

    @staticmethod
    async def _server(handler: Handler, limits: ConnectionLimits, max_body: int) -> HttpServer:
        return HttpServer(
            handler, max_body, HttpConnection, limits, max_connections=4, dialect=OPENAI_DIALECT
        )

    def feed(self, data: bytes) -> None:
        self.loop.call_soon(self.conn.data_received, data)  # inside the loop, as uvloop does
        self.settle()

    def settle(self) -> None:
        for _ in range(20):
            self.loop.run_until_complete(asyncio.sleep(0))

    def answers(self, head_request: bool = False) -> list[tuple[int, dict[str, str], bytes]]:
        return responses(self.transport.written, head_request)

    def close(self) -> None:
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.wait(pending))
        self.loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def harness() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(handler: Handler = echo, max_body: int = 1000, **limits: float) -> Harness:
        made.append(Harness(handler, ConnectionLimits(**limits), max_body))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for h in made:
        h.close()


def post(path: str, body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n%s\r\n%s" % (
        path.encode(),
        len(body),
        extra,
        body,
    )


def get(path: str, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return b"GET %s HTTP/1.1\r\nhost: x\r\n%s\r\n" % (path.encode(), extra)


def test_a_request_is_parsed_and_answered_with_a_date_and_its_length(harness: Any) -> None:
    h = harness()
    h.feed(post("/a%20b?x=1", b"hello"))
    [(status, headers, body)] = h.answers()
    assert status == 200 and json.loads(body) == {
        "method": "POST",
        "path": "/a b",  # percent-decoded, as ASGI servers give it
        "query": "x=1",
        "body": "hello",
    }
    assert headers["content-length"] == str(len(body)) and headers["date"].endswith(" GMT")
    assert not h.transport.closed  # keep-alive


def test_pipelined_requests_are_answered_in_order_one_at_a_time(harness: Any) -> None:
    gate = asyncio.Event()
    order: list[str] = []

    async def slow_first(cycle: Cycle) -> None:
        order.append(cycle.path)
        if cycle.path == "/1":
            await gate.wait()
        await echo(cycle)

    h = harness(slow_first)
    h.feed(get("/1") + get("/2") + get("/3"))
    assert order == ["/1"] and h.answers() == []
    assert not h.transport.reading  # one read ahead, the rest waits in the socket
    gate.set()
    h.settle()
    h.feed(b"")  # the paused reads resume: the third request's bytes were already fed
    assert [json.loads(b)["path"] for _, _, b in h.answers()] == ["/1", "/2", "/3"]
    assert order == ["/1", "/2", "/3"] and h.transport.reading


def test_a_chunked_body_is_assembled(harness: Any) -> None:
    h = harness()
    h.feed(b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
    h.feed(b"5\r\nhello\r\n")
    h.feed(b"6\r\n world\r\n0\r\n\r\n")
    [(status, _, body)] = h.answers()
    assert status == 200 and json.loads(body)["body"] == "hello world"


def test_a_chunked_body_over_the_limit_is_a_413_and_a_close(harness: Any) -> None:
    h = harness(max_body=10)
    h.feed(b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
    h.feed(b"8\r\n12345678\r\n")
    h.feed(b"8\r\n12345678\r\n")  # 16 bytes: over the limit, before the body ends
    [(status, headers, _)] = h.answers()
    assert status == 413 and headers["connection"] == "close" and h.transport.ended


def test_expect_continue_is_answered_when_the_body_is_read(harness: Any) -> None:
    h = harness()
    h.feed(b"POST /e HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\nexpect: 100-continue\r\n\r\n")
    assert h.transport.written == b"HTTP/1.1 100 Continue\r\n\r\n"
    h.feed(b"abc")
    [(status, _, body)] = h.answers()
    assert status == 200 and json.loads(body)["body"] == "abc"


def test_a_header_line_that_never_ends_is_cut_at_the_head_limit(harness: Any) -> None:
    h = harness(max_head_bytes=1024)
    h.feed(b"GET / HTTP/1.1\r\nx-long: ")
    for _ in range(3):
        h.feed(b"a" * 500)  # never a CRLF: the parser would keep it all
    [(status, headers, body)] = h.answers()
    assert status == 431 and headers["connection"] == "close" and h.transport.ended
    assert json.loads(body)["error"]["code"] == 431


def test_too_many_headers_is_a_431(harness: Any) -> None:
    h = harness(max_headers=5)
    h.feed(get("/", *[b"x-%d: 1" % i for i in range(6)]))
    assert h.answers()[0][0] == 431


def test_a_malformed_request_gets_a_json_400_and_a_close(harness: Any) -> None:
    h = harness()
    h.feed(b"NOT HTTP AT ALL\r\n\r\n")
    [(status, _, body)] = h.answers()
    error = json.loads(body)["error"]
    assert status == 400 and set(error) == {"message", "type", "param", "code"}
    assert h.transport.ended


def test_a_bad_request_after_a_good_one_is_answered_after_it(harness: Any) -> None:
    gate = asyncio.Event()

    async def held(cycle: Cycle) -> None:
        await gate.wait()
        await echo(cycle)

    h = harness(held)
    h.feed(get("/ok") + b"\x00\x01garbage\r\n\r\n")
    assert h.transport.written == b""
    gate.set()
    h.settle()
    assert [status for status, _, _ in h.answers()] == [200, 400] and h.transport.ended


def test_head_and_body_timeouts_are_408s(harness: Any) -> None:
    h = harness(head_timeout=1.0, body_timeout=1.0)
    h.feed(b"GET / HTTP/1.1\r\nhost")
    assert not h.conn.timed_out(h.conn.since + 0.5)
    assert h.conn.timed_out(h.conn.since + 1.5)
    assert h.answers()[0][0] == 408 and h.transport.ended

    waiting = harness(body_timeout=1.0)
    waiting.feed(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
    assert waiting.conn.phase is Phase.BODY
    assert waiting.conn.timed_out(waiting.conn.since + 1.5)  # its handler waits for the rest
    waiting.settle()
    assert waiting.answers()[0][0] == 408 and waiting.transport.ended


def test_idle_connections_close_silently_after_their_timeout(harness: Any) -> None:
    h = harness(keep_alive_timeout=5.0, head_timeout=30.0)
    fresh = h.conn.since
    assert not h.conn.timed_out(fresh + 10)  # nothing sent yet: the head's time applies
    h.feed(get("/"))
    assert not h.conn.timed_out(h.conn.since + 4)
    assert h.conn.timed_out(h.conn.since + 6)
    assert h.transport.closed and len(h.answers()) == 1  # no answer to an idle close


def test_a_request_being_answered_has_no_timeout(harness: Any) -> None:
    async def forever(cycle: Cycle) -> None:
        await asyncio.Event().wait()

    h = harness(forever, head_timeout=1.0, keep_alive_timeout=1.0)
    h.feed(get("/"))
    assert not h.conn.timed_out(h.conn.since + 100) and not h.transport.closed


def test_connection_close_and_http_1_0_close_after_the_answer(harness: Any) -> None:
    h = harness()
    h.feed(get("/", b"connection: close"))
    assert h.answers()[0][1]["connection"] == "close" and h.transport.closed
    old = harness()
    old.feed(b"GET / HTTP/1.0\r\n\r\n")
    assert old.transport.closed


def test_head_requests_get_no_body(harness: Any) -> None:
    h = harness()
    h.feed(b"HEAD /x HTTP/1.1\r\nhost: x\r\n\r\n" + get("/y"))
    [(status, headers, body)] = h.answers(head_request=True)[:1]
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    head_end = h.transport.written.index(b"\r\n\r\n") + 4
    assert h.transport.written[head_end:].startswith(b"HTTP/1.1 200 ")  # straight to the next


def test_an_upgrade_request_is_answered_as_http_1_1_then_closed(harness: Any) -> None:
    h = harness()
    h.feed(get("/", b"connection: upgrade", b"upgrade: websocket") + b"\x81\x05hello")
    [(status, _, _)] = h.answers()
    assert status == 200 and h.transport.closed


def test_a_stream_is_chunked_and_waits_for_a_slow_reader(harness: Any) -> None:
    results: list[object] = []
    release = asyncio.Event()

    async def streamer(cycle: Cycle) -> None:
        async def produce(write: Callable[[bytes], Awaitable[None]]) -> None:
            first = write(b"data: 1\n\n")
            results.append(first is READY)
            await first
            await release.wait()
            second = write(b"data: 2\n\n")  # the client stopped reading meanwhile
            results.append(second is READY)
            await second
            results.append("resumed")

        await cycle.stream(StreamingResponse(produce), [])

    h = harness(streamer)
    h.feed(get("/s"))
    h.conn.pause_writing()
    release.set()
    h.settle()
    assert results == [True, False]  # the second write waits
    h.conn.resume_writing()
    h.settle()
    assert results == [True, False, "resumed"]
    [(status, headers, body)] = h.answers()
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    assert body == b"data: 1\n\ndata: 2\n\n"


def test_a_lost_connection_tells_the_watcher_at_once(harness: Any) -> None:
    told: list[str] = []

    async def watcher(cycle: Cycle) -> None:
        cycle.on_disconnect(lambda: told.append("gone"))
        await asyncio.Event().wait()

    h = harness(watcher)
    h.feed(get("/"))
    h.loop.call_soon(h.conn.connection_lost, None)
    h.settle()
    assert told == ["gone"]


def test_over_the_cap_the_oldest_connection_with_nothing_answered_makes_room(
    harness: Any,
) -> None:
    async def forever(cycle: Cycle) -> None:
        await asyncio.Event().wait()

    h = harness(forever)  # its server holds at most 4 connections
    h.feed(get("/"))  # the oldest is busy answering: it is kept
    others = []
    for _ in range(4):
        conn = HttpConnection(h.server.state)
        conn.connection_made(RecordingTransport())
        others.append(conn)
    assert not h.transport.is_closing()
    assert others[0].transport is not None and others[0].transport.is_closing()
    assert not any(c.transport.is_closing() for c in others[1:])  # type: ignore[union-attr]
    assert len(h.server.state.connections) == 4 and h.server.state.shed == 1


def test_nothing_read_after_an_answer_that_closed_the_connection_is_handled(
    harness: Any,
) -> None:
    handled: list[str] = []

    async def closing(cycle: Cycle) -> None:
        handled.append(cycle.path)
        cycle.respond(Response(413, b"{}", headers=[(b"connection", b"close")]), [])

    h = harness(closing)
    h.feed(get("/first") + get("/second"))  # one buffer: the second is parsed after the close
    assert handled == ["/first"] and h.transport.closed


def test_a_long_header_split_over_reads_is_counted_once(harness: Any) -> None:
    """A header line arriving in two reads: its bytes count once against the head limit."""
    h = harness(max_head_bytes=1024)
    head = get("/", b"x-long: " + b"a" * 900)
    h.feed(head[:400])
    h.feed(head[400:])
    assert h.answers()[0][0] == 200
    h = harness(max_head_bytes=1024)
    head = get("/", b"x-long: " + b"a" * 1100)
    h.feed(head[:400])
    h.feed(head[400:])
    assert h.answers()[0][0] == 431


def test_an_early_413_lingers_dropping_the_rest_of_the_body(harness: Any) -> None:
    h = harness(max_body=10)
    h.feed(b"POST /big HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n" + b"x" * 100)
    [(status, _, _)] = h.answers()
    assert status == 413 and h.transport.eof and not h.transport.closed
    assert h.conn.phase is Phase.LINGER and h.transport.reading and h.conn.is_idle()
    written = h.transport.written
    h.feed(b"x" * 5000 + get("/next"))  # dropped, never parsed: nothing more is answered
    assert h.transport.written == written and not h.transport.closed


def test_a_lingering_close_stops_at_its_byte_bound(harness: Any) -> None:
    h = harness(max_head_bytes=100, linger_bytes=1000)
    h.feed(b"GET / HTTP/1.1\r\nx-long: ")
    h.feed(b"a" * 200)  # a line that never ends: over the head's limit
    assert h.answers()[0][0] == 431 and h.transport.eof and not h.transport.closed
    h.feed(b"a" * 1000)
    assert not h.transport.closed  # up to the bound: still dropped
    h.feed(b"a")
    assert h.transport.closed


def test_a_lingering_close_stops_at_its_time_bound(harness: Any) -> None:
    h = harness(max_head_bytes=100, linger_timeout=2.0)
    h.feed(b"GET / HTTP/1.1\r\nx-long: ")
    h.feed(b"a" * 200)  # a line that never ends: over the head's limit
    assert not h.conn.timed_out(h.conn.since + 1.5) and not h.transport.closed
    assert h.conn.timed_out(h.conn.since + 2.5) and h.transport.closed


def test_a_transport_that_cannot_end_one_side_closes_at_once(harness: Any) -> None:
    h = harness(max_head_bytes=100)
    h.transport.can_write_eof = lambda: False
    h.feed(b"GET / HTTP/1.1\r\nx-long: ")
    h.feed(b"a" * 200)  # a line that never ends: over the head's limit
    assert h.answers()[0][0] == 431 and h.transport.closed and not h.transport.eof


def test_a_complete_request_that_closes_does_not_linger(harness: Any) -> None:
    h = harness()
    h.feed(get("/", b"connection: close"))
    assert h.answers()[0][0] == 200 and h.transport.closed and not h.transport.eof
