"""7. The knee: how many concurrent streams one server process keeps on time.

At ITL 10 ms (TTFT 100 ms, 50 tokens): the largest stream count whose ITL p99 stays within
2 ms of the target and TTFT p99 under 115 ms (the bounds benchmark 11 holds its shapes
to), found by raising the count until a level fails and halving the gap between the last
pass and the first failure. The load client's CPU is printed beside each level: a client
near one full core is the limit, not the server.
"""

from __future__ import annotations

from bench import report
from bench.load import measure, running
from bench.options import Options, chat_body
from bench.report import BenchReport, Column, Figure, Measured
from bench.servers import Server, simulator
from bench.spec import LoadResult, LoadSpec

NAME = "knee"
TTFT_MS = 100
TOKENS = 50
KNEE_ITL_MS = 10
P50_SLACK_MS = 0.5
P99_SLACK_MS = 2.0
TTFT_P99_LIMIT_MS = 115.0
KNEE_START = 500
KNEE_STEP = 250
KNEE_CEILING = 4000
KNEE_RESOLUTION = 50

COLUMNS: list[Column] = [
    ("TTFT p50/p99 ms", lambda r: f"{report.ms(r.ttft.p50)} / {report.ms(r.ttft.p99)}"),
    ("ITL p50/p90/p99 ms", lambda r: report.trio(r.itl.p50, r.itl.p90, r.itl.p99)),
    ("ITL max", lambda r: report.ms(r.itl.max)),
    ("tokens/s", lambda r: report.rate(r.event_rate)),
    ("errors", lambda r: str(r.errors)),
    *report.CPU_COLUMNS,
]


def meets(load: LoadResult, itl_ms: float, p50_bound: bool = True) -> bool:
    """Whether a run kept time: ITL p99 within 2 ms of the target (and p50 within 0.5 ms
    when `p50_bound`), TTFT p99 under 115 ms, no error, and tokens actually measured."""
    if load.errors or load.unfinished or not load.itl.count or not load.ttft.count:
        return False
    if p50_bound and abs(load.itl.p50 - itl_ms) > P50_SLACK_MS:
        return False
    return load.itl.p99 <= itl_ms + P99_SLACK_MS and load.ttft.p99 < TTFT_P99_LIMIT_MS


def _server(model: str, itl_ms: int) -> Server:
    args = [
        "--time-to-first-token",
        f"{TTFT_MS}ms",
        "--inter-token-latency",
        f"{itl_ms}ms",
        "--max-num-seqs",
        str(KNEE_CEILING),
    ]
    return simulator(model, args, name=f"simulator ITL {itl_ms} ms")


def _spec(opts: Options, streams: int) -> LoadSpec:
    warmup, duration, _ = opts.plan(full=(2.0, 5.0, 1), quick=(1.0, 2.0, 1))
    body = chat_body(opts.model, max_tokens=TOKENS, stream=True)
    return LoadSpec(
        port=0, body=body, connections=streams, warmup=warmup, duration=duration, tokens=TOKENS
    )


def run(opts: Options) -> BenchReport:
    title = (
        f"7. The knee at ITL {KNEE_ITL_MS} ms: TTFT {TTFT_MS} ms, {TOKENS} tokens; bounds "
        f"ITL p99 +{P99_SLACK_MS:g} ms, TTFT p99 < {TTFT_P99_LIMIT_MS:g} ms"
    )
    rep = BenchReport(NAME, title)
    knee_server = _server(opts.model, KNEE_ITL_MS)
    with running([knee_server]):
        knee = _find_knee(opts, knee_server, rep)
    rep.figures.append(Figure(NAME, f"knee streams @ITL {KNEE_ITL_MS} ms", knee, 500, True))
    rep.problems += report.server_problems([knee_server])
    return rep


def _find_knee(opts: Options, server: Server, rep: BenchReport) -> int:
    """The largest stream count that keeps time (0 if even the first level fails)."""
    tried: dict[int, bool] = {}

    def attempt(streams: int) -> bool:
        load = measure(server, _spec(opts, streams))
        rep.runs.append(Measured(f"knee ITL {KNEE_ITL_MS} ms", streams, load))
        tried[streams] = meets(load, KNEE_ITL_MS, p50_bound=False)
        return tried[streams]

    passed, failed = 0, 0
    streams = KNEE_START
    while streams <= KNEE_CEILING:
        if not attempt(streams):
            failed = streams
            break
        passed = streams
        streams += KNEE_STEP
    if not failed:
        return passed
    while failed - passed > KNEE_RESOLUTION:
        middle = (passed + failed) // 2
        if attempt(middle):
            passed = middle
        else:
            failed = middle
    return passed


def show(rep: BenchReport) -> None:
    labels = dict.fromkeys(m.label for m in rep.runs)
    for label in labels:
        runs = [
            Measured(f"{m.level} streams", m.level, m.load)
            for m in sorted((m for m in rep.runs if m.label == label), key=lambda m: m.level)
        ]
        print(f"-- {label}")
        print(report.runs_table(runs, COLUMNS))
    knee = next((f.sim for f in rep.figures if f.metric.startswith("knee")), 0)
    print(f"knee at ITL {KNEE_ITL_MS} ms: {knee:.0f} concurrent streams")
