"""10. gRPC beside HTTP: 250 concurrent paced streams against one simulator, each protocol.

The server and the schedule are benchmark 3's (TTFT 100 ms, ITL 10 ms, 50 tokens). The
HTTP side is its load client streaming chat completions on 250 keep-alive connections;
the gRPC side is `bench/grpc_client.py`, a grpc.aio client in its own process (pinned to
the client's CPU, as the HTTP one) keeping 250 streamed `Generate` calls in flight on one
HTTP/2 connection, as a tokenizing gateway does: the chat prompt's token ids (from the
server's /tokenize), the same max_tokens, ignore_eos. Both are recorded alike: TTFT is
sent -> first token, ITL the gap between successive tokens, tokens/s the tokens received
inside the window. The two alternate on the same server; the ratio is grpc over http.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable

import msgspec

from bench import report, timing
from bench.load import LoadError, measure, running
from bench.options import Options, chat_body
from bench.report import BenchReport, Column, Figure, best_round
from bench.servers import Server, simulator
from bench.spec import GrpcSpec, LoadResult, LoadSpec

NAME = "grpc"
STREAMS = 250
TOKENS = timing.TOKENS
HTTP = "http"
GRPC = "grpc"


def tokens_per_second(result: LoadResult) -> float:
    """Tokens received inside the window, per second: each one is a TTFT or an ITL sample."""
    tokens = result.ttft.count + result.itl.count
    return tokens / result.window if result.window > 0 else 0.0


def cpu_us_per_token(cpu: float | None, result: LoadResult) -> float:
    """Microseconds of CPU per token received (0 when unknown)."""
    rate = tokens_per_second(result)
    return cpu * 1e6 / rate if cpu is not None and rate else 0.0


COLUMNS: list[Column] = [
    ("tokens/s", lambda r: report.rate(tokens_per_second(r))),
    ("TTFT p50/p99 ms", lambda r: f"{report.ms(r.ttft.p50)} / {report.ms(r.ttft.p99)}"),
    ("ITL p50/p99 ms", lambda r: f"{report.ms(r.itl.p50)} / {report.ms(r.itl.p99)}"),
    ("ITL max", lambda r: report.ms(r.itl.max)),
    ("ITL<1ms", lambda r: f"{r.itl_bursts:.1%}"),
    ("streams/s", lambda r: report.rate(r.rate)),
    *report.CPU_COLUMNS,
]

# (metric, its value in a run, higher is better): the grpc/http ratios, as summary figures.
RATIOS: list[tuple[str, Callable[[LoadResult], float], bool]] = [
    ("tokens/s", tokens_per_second, True),
    ("TTFT p50 ms", lambda r: r.ttft.p50, False),
    ("TTFT p99 ms", lambda r: r.ttft.p99, False),
    ("ITL p50 ms", lambda r: r.itl.p50, False),
    ("ITL p99 ms", lambda r: r.itl.p99, False),
    ("server CPU us/token", lambda r: cpu_us_per_token(r.server_cpu, r), False),
    ("client CPU us/token", lambda r: cpu_us_per_token(r.client_cpu, r), False),
]


def prompt_ids(server: Server, body: str) -> list[int]:
    """The token ids of the HTTP side's chat prompt, as the server tokenizes it."""
    chat = msgspec.json.decode(body)
    ask = {"model": chat["model"], "messages": chat["messages"]}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10.0)
    try:
        headers = {"content-type": "application/json"}
        conn.request("POST", "/tokenize", msgspec.json.encode(ask), headers)
        answer = conn.getresponse()
        text = answer.read()
    finally:
        conn.close()
    if answer.status != 200:
        raise LoadError(f"/tokenize answered {answer.status}: {text[:200]!r}")
    ids: list[int] = msgspec.json.decode(text)["tokens"]
    return ids


def run(opts: Options) -> BenchReport:
    warmup, duration, rounds = opts.plan(full=(2.0, 5.0, 2), quick=(1.0, 2.0, 1))
    title = (
        f"10. gRPC beside HTTP: {STREAMS} concurrent streams, TTFT {timing.TTFT_MS} ms, "
        f"ITL {timing.ITL_MS} ms, {TOKENS} tokens, one server; {rounds} alternating "
        f"round{'s' if rounds > 1 else ''} of {duration:g} s after {warmup:g} s each"
    )
    rep = BenchReport(NAME, title)
    body = chat_body(opts.model, max_tokens=TOKENS, stream=True)
    http_spec = LoadSpec(
        port=0, body=body, connections=STREAMS, warmup=warmup, duration=duration, tokens=TOKENS
    )
    server = simulator(opts.model, timing.SIM_ARGS)
    by_protocol: dict[str, list[LoadResult]] = {HTTP: [], GRPC: []}
    with running([server]):
        grpc_spec = GrpcSpec(
            port=server.port,
            input_ids=prompt_ids(server, body),
            max_tokens=TOKENS,
            streams=STREAMS,
            warmup=warmup,
            duration=duration,
        )
        for _ in range(rounds):
            by_protocol[HTTP].append(measure(server, http_spec))
            by_protocol[GRPC].append(measure(server, grpc_spec))
    rep.problems += report.server_problems([server])
    for label, results in by_protocol.items():
        rep.runs.append(best_round(label, STREAMS, results, tokens_per_second))
    http_load, grpc_load = rep.load(HTTP, STREAMS), rep.load(GRPC, STREAMS)
    rep.figures += [
        Figure(NAME, f"@{STREAMS} {metric} (grpc/http)", of(grpc_load), of(http_load), higher)
        for metric, of, higher in RATIOS
    ]
    return rep


def show(rep: BenchReport) -> None:
    print(report.runs_table(rep.runs, COLUMNS))
    rows = [
        [metric, f"{f.base:,.1f}", f"{f.sim:,.1f}", f"{f.ratio:.2f}"]
        for (metric, _, _), f in zip(RATIOS, rep.figures, strict=True)
    ]
    print(report.table(["measure", HTTP, GRPC, "grpc/http"], rows))
