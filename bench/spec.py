"""What the parent asks of a load run, and what the load client reports back (JSON)."""

from __future__ import annotations

import msgspec


class LoadSpec(msgspec.Struct, frozen=True):
    """One closed-loop load run against 127.0.0.1:port."""

    port: int
    body: str  # the JSON body POSTed to /v1/chat/completions, encoded once
    connections: int
    warmup: float  # seconds run but not counted
    duration: float  # seconds measured after the warm-up
    tokens: int = 0  # content events per stream; > 0 records TTFT and ITL
    server_pid: int = 0  # sampled for CPU use over the measured window
    drain_timeout: float = 5.0  # seconds to let in-flight requests end after the window
    path: str = "/v1/chat/completions"


class GrpcSpec(msgspec.Struct, frozen=True):
    """One closed-loop run of streamed Generate calls against 127.0.0.1:port (gRPC, h2c)."""

    port: int
    input_ids: list[int]  # the prompt, tokenized
    max_tokens: int  # with ignore_eos: every call streams this many chunks
    streams: int  # calls in flight at once, each starting the next as it ends
    warmup: float  # seconds run but not counted
    duration: float  # seconds measured after the warm-up
    channels: int = 1  # HTTP/2 connections the calls share (a gateway keeps one)
    server_pid: int = 0  # sampled for CPU use over the measured window
    drain_timeout: float = 5.0  # seconds to let calls in flight end after the window


class Percentiles(msgspec.Struct, frozen=True):
    """Milliseconds; count 0 means no samples (the other fields are then 0)."""

    count: int
    p50: float
    p90: float
    p99: float
    max: float
    mean: float = 0.0


class LoadResult(msgspec.Struct, frozen=True):
    """What one load run observed inside its measured window."""

    window: float  # seconds actually measured
    completed: int  # responses that ended inside the window
    latency: Percentiles  # request sent -> response ended, for those responses
    mean_bytes: float  # mean response size (head + body) of those responses
    events: int  # SSE `data: ` events received inside the window
    events_per_stream: float  # mean `data: ` events in a completed stream
    reads_per_stream: float  # mean socket reads per completed stream (server write batching)
    ttft: Percentiles  # request sent -> first content event
    itl: Percentiles  # gap between successive content events
    itl_bursts: float  # fraction of ITL gaps under 1 ms (tokens delivered together)
    errors: int  # non-200 responses, whole run
    error_samples: list[str]
    disconnects: int  # connections the server closed or refused, whole run
    unfinished: int  # requests still in flight when the drain timed out
    client_cpu: float  # CPU use of the load client over the window (1.0 = one core)
    server_cpu: float | None  # CPU use of the server over the window, when known
    core_busy: float | None  # how busy the server's CPU was (the server and anything else)
    # How late the client's own event loop woke for a 1 ms timer over the window: a client
    # that lags reports gaps it made itself.
    client_lag: Percentiles = Percentiles(0, 0.0, 0.0, 0.0, 0.0)

    @property
    def others_on_core(self) -> float | None:
        """The server's CPU time taken by other work (noise from a shared machine)."""
        if self.core_busy is None or self.server_cpu is None:
            return None
        return max(0.0, self.core_busy - self.server_cpu)

    @property
    def rate(self) -> float:
        return self.completed / self.window if self.window > 0 else 0.0

    @property
    def event_rate(self) -> float:
        return self.events / self.window if self.window > 0 else 0.0
