"""The load client: closed-loop HTTP/1.1 keep-alive connections on raw asyncio protocols.

Run as `python -m bench.client '<LoadSpec JSON>'`: pins itself to CPU 1, runs the load on
uvloop and prints a LoadResult as JSON. Each connection sends the pre-encoded request,
reads the response with minimal parsing (Content-Length bodies; for chunked SSE bodies it
counts `data: ` events per read and watches for the `0\\r\\n\\r\\n` terminator), then sends
the next request at once. Only what happens inside the measured window is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import resource
import sys
import time
from typing import cast

import msgspec
import uvloop

from bench.cpu import CLIENT_CPU, SERVER_CPU, cpu_busy_seconds, pin, process_cpu_seconds
from bench.spec import LoadResult, LoadSpec
from bench.stats import fraction_below, percentiles

SSE_EVENT = b"data: "
CHUNKED_END = b"0\r\n\r\n"
HEAD_END = b"\r\n\r\n"
MAX_ERROR_SAMPLES = 5

perf_counter = time.perf_counter


def encode_request(spec: LoadSpec) -> bytes:
    body = spec.body.encode()
    head = (
        f"POST {spec.path} HTTP/1.1\r\nhost: 127.0.0.1:{spec.port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def content_length(head: bytes) -> int:
    """The Content-Length of a lower-cased response head, or -1 (chunked)."""
    start = head.find(b"\r\ncontent-length:")
    if start < 0:
        return -1
    end = head.find(b"\r\n", start + 2)
    return int(head[start + 17 : end if end >= 0 else len(head)])


class Recorder:
    """Shared by every connection of a run: the window and what was observed inside it."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens  # content events per stream (0: do not record TTFT / ITL)
        self.start = math.inf
        self.end = math.inf
        self.stopping = False
        self.busy = 0  # connections with a request in flight
        self.idle = asyncio.Event()  # set once stopping and no request is in flight
        self.latencies: list[float] = []
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self.lag: list[float] = []  # the client loop's own lateness, seconds
        self.bytes = 0
        self.events = 0
        self.streams = 0
        self.stream_events = 0
        self.stream_reads = 0
        self.errors = 0
        self.error_samples: list[str] = []
        self.disconnects = 0

    def request_ended(self) -> None:
        self.busy -= 1
        if self.stopping and self.busy == 0:
            self.idle.set()

    def error(self, sample: bytes) -> None:
        self.errors += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(sample[:400].decode("latin-1"))


class Conn(asyncio.Protocol):
    """One keep-alive connection issuing one request after another."""

    def __init__(self, rec: Recorder, request: bytes) -> None:
        self.rec = rec
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self._reset()

    def _reset(self) -> None:
        self.head = bytearray()
        self.in_head = True
        self.status = 0
        self.length = -1  # Content-Length, or -1 for a chunked body
        self.got = 0  # body bytes of a Content-Length body
        self.size = 0  # bytes of the whole response
        self.tail = b""  # last bytes of the previous read, for split markers
        self.events = 0
        self.reads = 0
        self.t_sent = 0.0
        self.t_last = 0.0  # arrival of the previous content event

    def itself(self) -> Conn:
        """The protocol factory for create_connection: this very object."""
        return self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.busy:
            self.busy = False
            self.rec.disconnects += 1
            self.rec.request_ended()

    def send_next(self) -> None:
        transport = self.transport
        if self.rec.stopping or transport is None or transport.is_closing():
            return
        self._reset()
        self.busy = True
        self.rec.busy += 1
        self.t_sent = perf_counter()
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = perf_counter()
        self.size += len(data)
        if self.in_head:
            self.head += data
            end = self.head.find(HEAD_END)
            if end < 0:
                return
            data = bytes(self.head[end + 4 :])
            del self.head[end + 4 :]  # keeps the head alone, for error samples
            self._parse_head(end)
            if self.length == 0:
                self._done(now)
                return
            if not data:
                return
        if self.length >= 0:
            self.got += len(data)
            if self.status != 200:
                self.head += data
            if self.got >= self.length:
                self._done(now)
            return
        self._chunk(data, now)

    def _parse_head(self, end: int) -> None:
        head = bytes(self.head[:end]).lower()
        self.status = int(head[9:12])
        self.length = content_length(head)
        self.in_head = False

    def _chunk(self, data: bytes, now: float) -> None:
        self.reads += 1
        joined = self.tail + data if self.tail else data
        count = joined.count(SSE_EVENT)
        if count:
            self._events(count, now)
        if joined.endswith(CHUNKED_END):
            self._done(now)
        else:
            self.tail = joined[-5:]

    def _events(self, count: int, now: float) -> None:
        rec = self.rec
        first = self.events
        self.events = first + count
        inside = rec.start <= now < rec.end
        if inside:
            rec.events += count
        # Event 0 is the role chunk; content events are 1..tokens, then finish and [DONE].
        lo, hi = max(first, 1), min(first + count, rec.tokens + 1)
        if lo >= hi:
            return
        if inside:
            if lo == 1:  # the first content event: later ones in this read came with it
                rec.ttft.append(now - self.t_sent)
                rec.itl.extend([0.0] * (hi - 2))
            else:
                rec.itl.append(now - self.t_last)
                rec.itl.extend([0.0] * (hi - lo - 1))
        self.t_last = now

    def _done(self, now: float) -> None:
        rec = self.rec
        if self.status != 200:
            rec.error(bytes(self.head))
        elif rec.start <= now < rec.end:
            rec.latencies.append(now - self.t_sent)
            rec.bytes += self.size
            if self.length < 0:
                rec.streams += 1
                rec.stream_events += self.events
                rec.stream_reads += self.reads
        self.busy = False
        rec.request_ended()
        self.send_next()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def _connect(spec: LoadSpec, rec: Recorder, request: bytes) -> list[Conn]:
    loop = asyncio.get_running_loop()
    conns = [Conn(rec, request) for _ in range(spec.connections)]
    attempts = [loop.create_connection(conn.itself, "127.0.0.1", spec.port) for conn in conns]
    outcomes = await asyncio.gather(*attempts, return_exceptions=True)
    rec.disconnects += sum(1 for outcome in outcomes if isinstance(outcome, BaseException))
    return conns


async def sleep_until(deadline: float) -> None:
    delay = deadline - perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def drain(rec: Recorder, timeout: float) -> int:
    """Stops issuing requests and waits for those in flight; returns how many never ended."""
    rec.stopping = True
    if rec.busy > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rec.idle.wait(), timeout)
    return rec.busy


LAG_TICK = 0.001


async def watch_lag(rec: Recorder) -> None:
    """Records how late this loop wakes for a LAG_TICK timer inside the window."""
    await sleep_until(rec.start)
    while (now := perf_counter()) < rec.end:
        await asyncio.sleep(LAG_TICK)
        rec.lag.append(max(0.0, perf_counter() - now - LAG_TICK))


async def measure_window(
    rec: Recorder, server_pid: int, drain_timeout: float
) -> tuple[CpuSample, CpuSample, int]:
    """Waits out the window `rec` was given, sampling CPU at both ends, then drains it:
    (CPU before, CPU after, requests that never ended)."""
    await sleep_until(rec.start)
    before = CpuSample(server_pid)
    await sleep_until(rec.end)
    after = CpuSample(server_pid)
    return before, after, await drain(rec, drain_timeout)


class CpuSample:
    """CPU seconds of this process, of the server and of the server's core at one instant."""

    def __init__(self, server_pid: int) -> None:
        self.wall = perf_counter()
        self.client = time.process_time()
        self.server = process_cpu_seconds(server_pid) if server_pid else None
        self.core = cpu_busy_seconds(SERVER_CPU)


def _delta_share(before: float | None, after: float | None, wall: float) -> float | None:
    if before is None or after is None:
        return None
    return _share(after - before, wall)


def _share(used: float, wall: float) -> float:
    return used / wall if wall > 0 else 0.0


async def run(spec: LoadSpec) -> LoadResult:
    rec = Recorder(spec.tokens)
    rec.start = perf_counter() + spec.warmup
    rec.end = rec.start + spec.duration
    conns = await _connect(spec, rec, encode_request(spec))
    lag = asyncio.ensure_future(watch_lag(rec))
    before, after, unfinished = await measure_window(rec, spec.server_pid, spec.drain_timeout)
    await lag
    for conn in conns:
        conn.close()
    await asyncio.sleep(0.05)  # let the closes reach the server
    return load_result(spec.duration, rec, before, after, unfinished)


def load_result(
    duration: float, rec: Recorder, before: CpuSample, after: CpuSample, unfinished: int
) -> LoadResult:
    """What `rec` observed over a window of `duration` seconds, CPU sampled at its ends."""
    wall = after.wall - before.wall
    completed = len(rec.latencies)
    return LoadResult(
        window=duration,
        completed=completed,
        latency=percentiles(rec.latencies),
        mean_bytes=rec.bytes / completed if completed else 0.0,
        events=rec.events,
        events_per_stream=rec.stream_events / rec.streams if rec.streams else 0.0,
        reads_per_stream=rec.stream_reads / rec.streams if rec.streams else 0.0,
        ttft=percentiles(rec.ttft),
        itl=percentiles(rec.itl),
        itl_bursts=fraction_below(rec.itl, 0.001),
        errors=rec.errors,
        error_samples=rec.error_samples,
        disconnects=rec.disconnects,
        unfinished=unfinished,
        client_cpu=_share(after.client - before.client, wall),
        server_cpu=_delta_share(before.server, after.server, wall),
        core_busy=_delta_share(before.core, after.core, wall),
        client_lag=percentiles(rec.lag),
    )


def _raise_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def main(argv: list[str]) -> int:
    spec = msgspec.json.decode(argv[1], type=LoadSpec)
    pin(0, CLIENT_CPU)
    _raise_file_limit(spec.connections + 256)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        result = runner.run(run(spec))
    sys.stdout.buffer.write(msgspec.json.encode(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
