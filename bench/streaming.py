"""2. Streaming capacity at zero latency: 64 concurrent 100-token streams, closed loop.

Two baselines: one ASGI message per SSE event (what a per-token streaming server does),
and the whole stream in one message (the stack's ceiling). At zero latency the simulator
releases every token at once and writes the stream in about one message; `reads/stream`
(socket reads the client needed per stream) shows how each server batched its writes.
"""

from __future__ import annotations

from bench import report
from bench.load import alternate, running
from bench.options import Options, chat_body
from bench.report import BenchReport, Column, Figure, best_round
from bench.servers import Server, baseline, simulator
from bench.spec import LoadResult, LoadSpec

NAME = "streaming"
CONNECTIONS = 64
TOKENS = 100
SIM_ARGS = ["--max-num-seqs", "1024"]
BASE = "baseline"
BASE_ONE = "baseline, one write"

COLUMNS: list[Column] = [
    ("chunks/s", lambda r: report.rate(r.event_rate)),
    ("streams/s", lambda r: report.rate(r.rate)),
    ("events/stream", lambda r: f"{r.events_per_stream:.1f}"),
    ("reads/stream", lambda r: f"{r.reads_per_stream:.1f}"),
    ("stream p50 ms", lambda r: report.ms(r.latency.p50)),
    ("stream p99 ms", lambda r: report.ms(r.latency.p99)),
    *report.CPU_COLUMNS,
]


def chunks_per_second(result: LoadResult) -> float:
    return result.event_rate


def _servers(model: str) -> list[Server]:
    return [
        baseline(model, [], name=BASE),
        baseline(model, ["--one-write"], name=BASE_ONE),
        simulator(model, SIM_ARGS),
    ]


def run(opts: Options) -> BenchReport:
    warmup, duration, rounds = opts.plan(full=(1.0, 4.0, 3), quick=(1.0, 2.0, 2))
    title = (
        f"2. Streaming capacity, zero latency: {CONNECTIONS} streams of {TOKENS} tokens; "
        f"best of {rounds} alternating rounds of {duration:g} s after {warmup:g} s warm-up"
    )
    spec = LoadSpec(
        port=0,
        body=chat_body(opts.model, max_tokens=TOKENS, stream=True),
        connections=CONNECTIONS,
        warmup=warmup,
        duration=duration,
    )
    rep = BenchReport(NAME, title)
    servers = _servers(opts.model)
    with running(servers):
        per_server = alternate(servers, spec, rounds)
    rep.problems += report.server_problems(servers)
    for server, results in zip(servers, per_server, strict=True):
        rep.runs.append(best_round(server.name, CONNECTIONS, results, chunks_per_second))
    _add_figures(rep)
    return rep


def _add_figures(rep: BenchReport) -> None:
    sim = rep.load("simulator", CONNECTIONS)
    base, one = rep.load(BASE, CONNECTIONS), rep.load(BASE_ONE, CONNECTIONS)
    rep.figures += [
        Figure(NAME, "SSE chunks/s", sim.event_rate, base.event_rate, higher_is_better=True),
        Figure(NAME, "streams/s", sim.rate, base.rate, higher_is_better=True),
        Figure(NAME, "SSE chunks/s vs one-write", sim.event_rate, one.event_rate, True),
    ]


def show(rep: BenchReport) -> None:
    print(report.runs_table(rep.runs, COLUMNS))
