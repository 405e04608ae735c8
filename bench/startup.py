"""4. Time from process start to the first 200 from /health, and idle memory."""

from __future__ import annotations

import statistics

from bench import report
from bench.options import Options
from bench.report import BenchReport, Figure
from bench.servers import Server, baseline, simulator

NAME = "startup"


def _started(server: Server) -> Server:
    """Starts the server, waits for /health, stops it; its figures stay on it."""
    with server:
        pass
    return server


def run(opts: Options) -> BenchReport:
    _, _, starts = opts.plan(full=(0.0, 0.0, 7), quick=(0.0, 0.0, 3))
    rep = BenchReport(NAME, f"4. Start-up: spawn -> /health answers 200; median of {starts} starts")
    runs: dict[str, list[Server]] = {"baseline": [], "simulator": []}
    for _ in range(starts):  # interleaved, so a slow moment of the machine hits both
        runs["baseline"].append(_started(baseline(opts.model, [])))
        runs["simulator"].append(_started(simulator(opts.model, [])))
    for servers in runs.values():
        rep.problems += report.server_problems(servers)

    def median_start(name: str) -> float:
        return statistics.median(s.started_in for s in runs[name])

    def idle_rss(name: str) -> float:
        return max(s.peak_rss_mib for s in runs[name])

    rep.figures += [
        Figure(
            NAME, "start to /health s", median_start("simulator"), median_start("baseline"), False
        ),
        Figure(NAME, "idle peak RSS MiB", idle_rss("simulator"), idle_rss("baseline"), False),
    ]
    return rep


def show(rep: BenchReport) -> None:
    rows = [[f.metric, f"{f.base:.3f}", f"{f.sim:.3f}"] for f in rep.figures]
    print(report.table(["measure", "baseline", "simulator"], rows))
