"""12. Paced streams at scale: 600 streams at ITL 10 ms and 1,200 at ITL 20 ms (60,000
tokens/s while all stream; 50-57k over the window, each stream's TTFT a pause), TTFT
100 ms, 50 tokens, closed loop, each held to ITL p50 within 0.5 ms of
the target, ITL p99 within 2 ms of it and TTFT p99 under 115 ms (`bounds met`); then 2,000
and 5,000 concurrent connections at a gentler pace (ITL 50 and 100 ms, 40-50k tokens/s),
where what is asked is that every stream is served, with no error and no refused
connection.

The baseline keeps the same schedule as naively as possible (one asyncio.sleep per token
per request, one write per token). Each shape runs on a fresh server, so the peak RSS is
that shape's. Server CPU per token is the server's CPU time over the window divided by
the content chunks the client received in it; the client's own CPU and the lateness of
its event loop are shown beside, since a client that lags reports gaps it made itself.
"""

from __future__ import annotations

from bench import report
from bench.knee import meets
from bench.load import measure, running
from bench.options import Options, chat_body
from bench.report import BenchReport, Column, Figure, Measured
from bench.servers import Server, baseline, simulator
from bench.spec import LoadResult, LoadSpec

NAME = "pacing"
TTFT_MS = 100
TOKENS = 50
SHAPES = ((600, 10), (1200, 20), (2000, 50), (5000, 100))  # (concurrent streams, ITL ms)


def cpu_us_per_token(load: LoadResult) -> float:
    """The server's CPU microseconds per content chunk received."""
    if not load.events or load.server_cpu is None:
        return 0.0
    return load.server_cpu * load.window / load.events * 1e6


COLUMNS: list[Column] = [
    ("TTFT p50/p99 ms", lambda r: f"{r.ttft.p50:.1f} / {r.ttft.p99:.1f}"),
    ("ITL p50/p90/p99 ms", lambda r: report.trio(r.itl.p50, r.itl.p90, r.itl.p99)),
    ("tokens/s", lambda r: report.rate(r.event_rate)),
    ("server us/token", lambda r: f"{cpu_us_per_token(r):.1f}"),
    *report.CPU_COLUMNS,
    ("client lag p99 ms", lambda r: report.ms(r.client_lag.p99)),
    ("streams done", lambda r: str(r.completed)),
]


def _bounds_column(itl_ms: int) -> Column:
    return ("bounds met", lambda r: "yes" if meets(r, itl_ms) else "no")


def _sim_args(itl_ms: int) -> list[str]:
    return [
        "--time-to-first-token",
        f"{TTFT_MS}ms",
        "--inter-token-latency",
        f"{itl_ms}ms",
        "--max-num-seqs",
        "8192",
    ]


def _servers(model: str, itl_ms: int) -> list[Server]:
    return [
        baseline(model, ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(itl_ms)]),
        simulator(model, _sim_args(itl_ms)),
    ]


def _level(streams: int, itl_ms: int) -> int:
    """A run's key in the report: streams and ITL in one number (600 x 10 -> 600010)."""
    return streams * 1000 + itl_ms


def run(opts: Options) -> BenchReport:
    warmup, duration, _ = opts.plan(full=(3.0, 6.0, 1), quick=(2.0, 3.0, 1))
    title = (
        f"12. Paced streams: TTFT {TTFT_MS} ms, {TOKENS} tokens; {duration:g} s measured "
        f"after {warmup:g} s, a fresh server per shape"
    )
    rep = BenchReport(NAME, title)
    body = chat_body(opts.model, max_tokens=TOKENS, stream=True)
    for streams, itl_ms in SHAPES:
        spec = LoadSpec(
            port=0, body=body, connections=streams, warmup=warmup, duration=duration, tokens=TOKENS
        )
        rss: dict[str, float] = {}
        for server in _servers(opts.model, itl_ms):
            with running([server]):  # one at a time: idle streams must not load the other
                load = measure(server, spec)
            rep.runs.append(Measured(server.name, _level(streams, itl_ms), load))
            rep.problems += report.server_problems([server])
            rss[server.name] = server.peak_rss_mib
        _figures(rep, streams, itl_ms, rss)
    return rep


def _figures(rep: BenchReport, streams: int, itl_ms: int, rss: dict[str, float]) -> None:
    base = rep.load("baseline", _level(streams, itl_ms))
    sim = rep.load("simulator", _level(streams, itl_ms))
    shape = f"{streams}x{itl_ms}ms"
    rep.figures += [
        Figure(NAME, f"{shape} peak RSS MiB", rss["simulator"], rss["baseline"], False),
        Figure(
            NAME, f"{shape} ITL p50 - target ms", sim.itl.p50 - itl_ms, base.itl.p50 - itl_ms, False
        ),
        Figure(
            NAME, f"{shape} ITL p99 - target ms", sim.itl.p99 - itl_ms, base.itl.p99 - itl_ms, False
        ),
        Figure(NAME, f"{shape} TTFT p99 ms", sim.ttft.p99, base.ttft.p99, False),
        Figure(
            NAME,
            f"{shape} server CPU us/token",
            cpu_us_per_token(sim),
            cpu_us_per_token(base),
            False,
        ),
    ]


def show(rep: BenchReport) -> None:
    for streams, itl_ms in SHAPES:
        print(f"-- {streams} streams at ITL {itl_ms} ms")
        runs = [m for m in rep.runs if m.level == _level(streams, itl_ms)]
        print(report.runs_table(runs, [*COLUMNS, _bounds_column(itl_ms)]))
    report.print_problems(rep.problems)
