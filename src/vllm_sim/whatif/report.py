"""A run's pictures (PNG, by matplotlib) and its one-page HTML report.

matplotlib is the optional `plots` extra: without it the report has its tables and no
pictures, and says how to get them.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_sim.whatif.outdir import OutFolder, png_bytes
from vllm_sim.whatif.plan import Plan
from vllm_sim.whatif.results import Distribution, RunResult

REPORT_HTML = "report.html"
PLOTS = ("load.png", "kv_usage.png", "latency_cdf.png")
NO_PLOTS = "pictures need matplotlib: pip install 'vllm-sim[plots]'"


def plotting_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _folder(folder: Path | OutFolder) -> OutFolder:
    return folder if isinstance(folder, OutFolder) else OutFolder.prepare(folder)


def write_plots(result: RunResult, folder: Path | OutFolder) -> list[Path]:
    """The run's PNG pictures in `folder`; none without matplotlib."""
    if not plotting_available():
        return []
    out = _folder(folder)
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    import matplotlib.pyplot as plt

    samples = result.samples
    times = [s.time for s in samples]
    paths = [out.path / name for name in PLOTS]

    figure, axes = plt.subplots(figsize=(8, 3.5))
    axes.plot(times, [s.running for s in samples], label="running")
    axes.plot(times, [s.waiting for s in samples], label="waiting")
    axes.set(xlabel="time (s)", ylabel="requests", title="Running and waiting requests")
    axes.legend()
    _save(figure, out, PLOTS[0])

    figure, axes = plt.subplots(figsize=(8, 3.5))
    axes.plot(times, [100 * s.kv_usage for s in samples], color="tab:purple")
    axes.set(xlabel="time (s)", ylabel="% of blocks", title="KV cache usage (mean of instances)")
    _save(figure, out, PLOTS[1])

    figure, grid = plt.subplots(1, 3, figsize=(12, 3.5))
    done = [r for r in result.records if r.ok]
    for axes, (name, unit, scale) in zip(
        grid, (("ttft", "s", 1.0), ("itl", "ms", 1000.0), ("e2e", "s", 1.0)), strict=True
    ):
        values = sorted(scale * v for v in (getattr(r, name) for r in done) if v is not None)
        if values:
            axes.plot(values, [(i + 1) / len(values) for i in range(len(values))])
        axes.set(
            xlabel=f"{name.upper()} ({unit})",
            ylabel="share of requests",
            title=f"{name.upper()} CDF",
        )
    _save(figure, out, PLOTS[2])
    return paths


def _save(figure: Any, out: OutFolder, name: str) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    data = png_bytes(figure)
    plt.close(figure)
    return out.write_bytes(name, data)


def _origin(origin: dict[str, Any]) -> list[str]:
    """What the run was made from, above everything else on the page."""
    if not origin:
        return []
    digest = origin.get("trace_sha256") or "unreadable"
    return [
        f"<p>trace <code>{html.escape(str(origin.get('trace')))}</code> (SHA-256 "
        f"<code>{html.escape(str(digest))}</code>), vllm-sim "
        f"{html.escape(str(origin.get('version')))}<br>"
        f"<code>{html.escape(str(origin.get('command')))}</code></p>"
    ]


def write_html(result: RunResult, folder: Path | OutFolder, pictures: Sequence[Path]) -> Path:
    """One self-contained page: settings, summary, latency table, pictures inlined."""
    summary = result.summary
    rows = [
        (
            "requests",
            f"{summary.requests} ({summary.completed} completed, {summary.failed} failed)",
        ),
        ("duration", f"{summary.duration:.2f} s"),
        ("request throughput", f"{summary.request_throughput:.3f} req/s"),
        ("output throughput", f"{summary.output_throughput:.1f} tok/s"),
        ("prefix cache hit rate", f"{100 * summary.prefix_cache_hit_rate:.1f}%"),
        ("preemptions", str(summary.preemptions)),
        ("max running / waiting", f"{summary.max_running} / {summary.max_waiting}"),
        (
            "KV usage mean / max",
            f"{100 * summary.mean_kv_usage:.1f}% / {100 * summary.max_kv_usage:.1f}%",
        ),
    ]
    if result.wall_seconds:
        rows.append(
            (
                "run time",
                f"{result.wall_seconds:.2f} s "
                f"({summary.duration / result.wall_seconds:.0f}x real time)",
            )
        )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>vllm-sim {html.escape(result.kind)} report</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:4px 10px;text-align:right}td:first-child,th:first-child{text-align:left}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>vllm-sim {html.escape(result.kind)} report</h1>",
        *_origin(result.origin),
        *_notices(result),
        _table(["setting", "value"], [(k, str(v)) for k, v in result.settings.items()]),
        _table(["summary", ""], rows),
        _table(
            ["latency (s)", "mean", "p50", "p90", "p99", "max"],
            [_latency_row(name, dist) for name, dist in summary.latencies.items()],
        ),
    ]
    for picture in pictures:
        data = base64.b64encode(picture.read_bytes()).decode()
        parts.append(f"<p><img alt='{picture.stem}' src='data:image/png;base64,{data}'></p>")
    if not pictures and not plotting_available():
        parts.append(f"<p>No pictures: {html.escape(NO_PLOTS)}.</p>")
    if result.problems:
        shown = "".join(f"<li>{html.escape(p)}</li>" for p in result.problems[:100])
        more = len(result.problems) - 100
        parts.append(f"<h2>Trace lines skipped</h2><ul>{shown}</ul>")
        if more > 0:
            parts.append(f"<p>and {more} more (result.json lists them all)</p>")
    parts.append("</body></html>\n")
    return _folder(folder).write_text(REPORT_HTML, "".join(parts))


def _notices(result: RunResult) -> list[str]:
    """What must be read first: a partial run, requests that did not complete."""
    notices = []
    summary = result.summary
    if result.partial:
        notices.append(
            f"<p><strong>Partial result:</strong> the run was interrupted at "
            f"{result.stopped_at or 0.0:.1f} s of simulated time; {summary.requests} of "
            f"{result.trace_requests} trace requests had arrived.</p>"
        )
    if summary.failed:
        notices.append(
            f"<p><strong>{summary.failed} of {summary.requests} requests did not "
            "complete</strong> (their errors are in requests.csv).</p>"
        )
    return notices


def _latency_row(name: str, dist: Distribution | None) -> tuple[str, ...]:
    if dist is None:
        return (name, "-", "-", "-", "-", "-")
    return (name, *(f"{v:.4f}" for v in (dist.mean, dist.p50, dist.p90, dist.p99, dist.max)))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


PLAN_JSON, PLAN_CSV, PLAN_PNG = "plan.json", "plan.csv", "frontier.png"


def frontier_rows(result: Plan) -> tuple[list[str], list[list[str]]]:
    """The frontier as a table: a header and one row per point, cheapest first."""
    names = list(result.slo)
    header = [
        "gpu",
        "tp",
        "max_num_seqs",
        "max_batched",
        "offload_gib",
        "replicas",
        "$/h",
        *names,
        "failed",
        "meets",
    ]
    rows = []
    for point in result.frontier:
        c = point.candidate
        rows.append(
            [
                c.gpu,
                str(c.tensor_parallel),
                str(c.max_num_seqs),
                str(c.max_num_batched_tokens),
                f"{c.kv_offloading_gib:g}",
                str(point.replicas),
                f"{point.cost_per_hour:.2f}",
                *(f"{1000 * point.metrics.get(n, float('nan')):.1f}ms" for n in names),
                str(point.failed),
                "yes" if point.meets else "no",
            ]
        )
    return header, rows


def write_plan(result: Plan, folder: Path | OutFolder, plots: bool) -> list[Path]:
    """plan.json, plan.csv (the frontier) and frontier.png in `folder`."""
    import csv
    import json

    out = _folder(folder)
    written = [out.write_text(PLAN_JSON, json.dumps(result.to_json(), indent=1) + "\n")]
    header, rows = frontier_rows(result)
    with out.stage(PLAN_CSV) as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    written.append(out.path / PLAN_CSV)
    if plots and plotting_available() and result.frontier:
        written.append(_frontier_png(result, out))
    else:
        out.remove(PLAN_PNG)  # an earlier plan's picture is not this one's
    return written


def _frontier_png(result: Plan, out: OutFolder) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result.slo)
    figure, grid = plt.subplots(1, len(names), figsize=(5 * len(names), 3.8), squeeze=False)
    for axes, name in zip(grid[0], names, strict=True):
        for meets, marker, label in ((True, "o", "meets the SLO"), (False, "x", "misses it")):
            points = [p for p in result.frontier if p.meets is meets]
            axes.scatter(
                [p.cost_per_hour for p in points],
                [1000 * p.metrics.get(name, float("nan")) for p in points],
                marker=marker,
                label=label,
            )
        axes.axhline(1000 * result.slo[name], color="tab:red", linestyle="--", label="limit")
        axes.set(xlabel="$ per hour", ylabel=f"{name} (ms)", title=f"{name} by fleet cost")
        axes.legend()
    return _save(figure, out, PLAN_PNG)
