"""1. Non-streaming chat completions at zero latency: 64 keep-alive connections, closed loop."""

from __future__ import annotations

from bench import report
from bench.load import alternate, running
from bench.options import Options, chat_body
from bench.report import BenchReport, Column, Figure, best_round
from bench.servers import baseline, raw_baseline, simulator
from bench.spec import LoadResult, LoadSpec

NAME = "throughput"
CONNECTIONS = 64
SIM_ARGS = ["--max-num-seqs", "1024"]
QUIET = "simulator, --disable-log-stats"

COLUMNS: list[Column] = [
    ("req/s", lambda r: report.rate(r.rate)),
    ("p50 ms", lambda r: report.ms(r.latency.p50)),
    ("p99 ms", lambda r: report.ms(r.latency.p99)),
    ("resp bytes", lambda r: f"{r.mean_bytes:.0f}"),
    *report.CPU_COLUMNS,
]


def requests_per_second(result: LoadResult) -> float:
    return result.rate


def chat_load(opts: Options, warmup: float, duration: float) -> LoadSpec:
    """This benchmark's load: a ten-token chat on CONNECTIONS connections, closed loop."""
    return LoadSpec(
        port=0,
        body=chat_body(opts.model, max_tokens=10),
        connections=CONNECTIONS,
        warmup=warmup,
        duration=duration,
    )


def run(opts: Options) -> BenchReport:
    warmup, duration, rounds = opts.plan(full=(1.0, 4.0, 3), quick=(1.0, 2.0, 2))
    title = (
        f"1. Non-streaming chat throughput, zero latency: {CONNECTIONS} connections; "
        f"best of {rounds} alternating rounds of {duration:g} s after {warmup:g} s warm-up"
    )
    spec = chat_load(opts, warmup, duration)
    rep = BenchReport(NAME, title)
    quiet = simulator(opts.model, [*SIM_ARGS, "--disable-log-stats"])
    quiet.name = QUIET
    raw = raw_baseline(opts.model)
    servers = [raw, baseline(opts.model, []), quiet, simulator(opts.model, SIM_ARGS)]
    with running(servers):
        per_server = alternate(servers, spec, rounds)
    rep.problems += report.server_problems(servers)
    for server, results in zip(servers, per_server, strict=True):
        rep.runs.append(best_round(server.name, CONNECTIONS, results, requests_per_second))
    base, sim = rep.load("baseline", CONNECTIONS), rep.load("simulator", CONNECTIONS)
    quiet_load = rep.load(QUIET, CONNECTIONS)
    raw_load = rep.load(raw.name, CONNECTIONS)
    rep.figures += [
        Figure(NAME, "requests/s", sim.rate, base.rate, higher_is_better=True),
        Figure(NAME, "latency p50 ms", sim.latency.p50, base.latency.p50, False),
        Figure(NAME, "latency p99 ms", sim.latency.p99, base.latency.p99, False),
        # The cost of recording vLLM's metrics: the simulator against itself without them.
        Figure(NAME, "requests/s vs no metrics", sim.rate, quiet_load.rate, True),
        # The ceiling of an HTTP layer of our own: the same answers with no ASGI, no uvicorn.
        Figure(NAME, "requests/s vs raw protocol", sim.rate, raw_load.rate, True),
        Figure(NAME, "bare ASGI req/s vs raw protocol", base.rate, raw_load.rate, True),
    ]
    return rep


def show(rep: BenchReport) -> None:
    print(report.runs_table(rep.runs, COLUMNS))
