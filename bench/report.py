"""What a benchmark reports, and how it is printed (tables) and saved (JSON)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from bench.servers import Server
from bench.spec import LoadResult


class Unavailable(Exception):
    """A benchmark that cannot run on this machine (a tool it needs is missing)."""


@dataclass(frozen=True, slots=True)
class Measured:
    """One load run: against which server, at which concurrency."""

    label: str
    level: int
    load: LoadResult
    rounds: tuple[float, ...] = ()  # the headline figure of every round; `load` is the best


def best_round(
    label: str, level: int, results: Sequence[LoadResult], key: Callable[[LoadResult], float]
) -> Measured:
    """The round with the highest `key`: a shared machine's noise only ever slows a run."""
    best = max(results, key=key)
    return Measured(label, level, best, tuple(key(r) for r in results))


@dataclass(frozen=True, slots=True)
class Figure:
    """One summary line: the simulator's figure beside the baseline's."""

    bench: str
    metric: str
    sim: float
    base: float
    higher_is_better: bool

    @property
    def ratio(self) -> float:
        return self.sim / self.base if self.base else 0.0


@dataclass(slots=True)
class BenchReport:
    name: str
    title: str
    runs: list[Measured] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def load(self, label: str, level: int) -> LoadResult:
        return next(m.load for m in self.runs if m.label == label and m.level == level)


Column = tuple[str, Callable[[LoadResult], str]]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned first column, right-aligned others."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        return "  ".join(cells).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])


def runs_table(runs: Sequence[Measured], columns: Sequence[Column]) -> str:
    """One row per run; a last `rounds` column when runs were repeated."""
    header = ["run", *(name for name, _ in columns)]
    rows = [[m.label, *(cell(m.load) for _, cell in columns)] for m in runs]
    if any(len(m.rounds) > 1 for m in runs):
        header.append("rounds")
        for row, m in zip(rows, runs, strict=True):
            row.append(" ".join(compact(x) for x in m.rounds))
    return table(header, rows)


def compact(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def rate(value: float) -> str:
    return f"{value:,.0f}"


def ms(value: float) -> str:
    return f"{value:.1f}"


def share(value: float | None) -> str:
    return "?" if value is None else f"{value:.0%}"


def trio(p50: float, p90: float, p99: float) -> str:
    return f"{p50:.1f} / {p90:.1f} / {p99:.1f}"


def trouble(load: LoadResult) -> str:
    """Errors, disconnects and hung requests, or 0."""
    parts = [
        f"{load.errors} err" if load.errors else "",
        f"{load.disconnects} disc" if load.disconnects else "",
        f"{load.unfinished} hung" if load.unfinished else "",
    ]
    return ", ".join(p for p in parts if p) or "0"


CPU_COLUMNS: list[Column] = [
    ("errors", trouble),
    ("client CPU", lambda r: share(r.client_cpu)),
    ("server CPU", lambda r: share(r.server_cpu)),
    ("others on its CPU", lambda r: share(r.others_on_core)),
]


def server_problems(servers: Sequence[Server]) -> list[str]:
    return [f"{server.name}: {problem}" for server in servers for problem in server.problems]


def problems_of(runs: Sequence[Measured]) -> list[str]:
    lines: list[str] = []
    for m in runs:
        lines += [f"{m.label} @{m.level}: {sample!r}" for sample in m.load.error_samples]
    return lines


def print_problems(problems: Sequence[str]) -> None:
    for problem in problems:
        print(f"  ! {problem}")


def summary(figures: Sequence[Figure]) -> str:
    rows = [
        [
            f.bench,
            f.metric,
            f"{f.sim:,.1f}",
            f"{f.base:,.1f}",
            f"{f.ratio:.2f}",
            "higher" if f.higher_is_better else "lower",
        ]
        for f in figures
    ]
    return table(["bench", "metric", "sim", "baseline", "sim/base", "better"], rows)


def write_json(path: str, header: dict[str, object], reports: Sequence[BenchReport]) -> None:
    benches = [
        {
            "name": r.name,
            "title": r.title,
            "runs": r.runs,
            "figures": [{**msgspec.to_builtins(f), "ratio": f.ratio} for f in r.figures],
            "problems": r.problems,
        }
        for r in reports
    ]
    with open(path, "wb") as out:
        out.write(msgspec.json.format(msgspec.json.encode({**header, "benchmarks": benches})))
