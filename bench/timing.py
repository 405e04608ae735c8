"""3. Timing fidelity: TTFT 100 ms, ITL 10 ms, 50-token streams at rising concurrency.

The baseline keeps the same schedule as naively as possible (one asyncio.sleep per token
per request); the simulator serves every stream from one token clock. Client-observed
TTFT is request sent -> first content chunk; ITL is the gap between successive content
chunks (0 when two arrive in one read: `ITL<1ms` is the share of such bursts).
"""

from __future__ import annotations

from bench import report
from bench.load import measure, running
from bench.options import Options, chat_body
from bench.report import BenchReport, Column, Figure, Measured
from bench.servers import baseline, simulator
from bench.spec import LoadSpec

NAME = "timing"
TTFT_MS = 100
ITL_MS = 10
TOKENS = 50
LEVELS = (1, 100, 250, 500, 1000)
SIM_ARGS = [
    "--time-to-first-token",
    f"{TTFT_MS}ms",
    "--inter-token-latency",
    f"{ITL_MS}ms",
    "--max-num-seqs",
    "1024",
]
BASE_ARGS = ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]

COLUMNS: list[Column] = [
    ("TTFT p50/p90/p99 ms", lambda r: report.trio(r.ttft.p50, r.ttft.p90, r.ttft.p99)),
    ("ITL p50/p90/p99 ms", lambda r: report.trio(r.itl.p50, r.itl.p90, r.itl.p99)),
    ("ITL max", lambda r: report.ms(r.itl.max)),
    ("ITL<1ms", lambda r: f"{r.itl_bursts:.1%}"),
    ("streams/s", lambda r: report.rate(r.rate)),
    *report.CPU_COLUMNS,
]


def specs(opts: Options) -> list[LoadSpec]:
    warmup, duration, _ = opts.plan(full=(2.0, 5.0, 1), quick=(1.0, 2.0, 1))
    body = chat_body(opts.model, max_tokens=TOKENS, stream=True)
    return [
        LoadSpec(port=0, body=body, connections=n, warmup=warmup, duration=duration, tokens=TOKENS)
        for n in LEVELS
    ]


def run(opts: Options) -> BenchReport:
    plan = specs(opts)
    title = (
        f"3. Timing fidelity: TTFT {TTFT_MS} ms, ITL {ITL_MS} ms, {TOKENS} tokens; "
        f"{plan[0].duration:g} s measured after {plan[0].warmup:g} s per level"
    )
    rep = BenchReport(NAME, title)
    servers = [baseline(opts.model, BASE_ARGS), simulator(opts.model, SIM_ARGS)]
    for server in servers:
        # One server at a time: 1,000 idle keep-alive streams must not load the other.
        with running([server]):
            loads = [measure(server, spec) for spec in plan]
        rep.runs += [Measured(server.name, n, load) for n, load in zip(LEVELS, loads, strict=True)]
    rep.problems += report.server_problems(servers)
    base_server, sim_server = servers
    rep.figures.append(
        Figure(
            NAME,
            "peak RSS MiB (all levels)",
            sim_server.peak_rss_mib,
            base_server.peak_rss_mib,
            False,
        )
    )
    for n in LEVELS:
        base, sim = rep.load("baseline", n), rep.load("simulator", n)
        rep.figures += [
            Figure(NAME, f"@{n} TTFT p99 ms", sim.ttft.p99, base.ttft.p99, False),
            Figure(NAME, f"@{n} ITL p99 ms", sim.itl.p99, base.itl.p99, False),
        ]
    return rep


def show(rep: BenchReport) -> None:
    for n in LEVELS:
        print(f"-- {n} concurrent stream{'s' if n > 1 else ''}")
        print(report.runs_table([m for m in rep.runs if m.level == n], COLUMNS))
