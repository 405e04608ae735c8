"""The run's report, as Markdown for a reader and JSON for tools."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from conformance.accepted import Verdict
from conformance.case import Case
from conformance.compare import Difference, Exchange, body_kind, rules_for
from conformance.sse import Run, parse_sse, runs, summary


@dataclass(frozen=True)
class CaseResult:
    case: Case
    oracle: Exchange
    sim: Exchange
    differences: list[Difference]


@dataclass(frozen=True)
class RunInfo:
    oracle_version: str
    started: str
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> duration
    commands: dict[str, str] = field(default_factory=dict)


def cell(text: object) -> str:
    """A Markdown table cell: pipes escaped, newlines flattened, long text cut."""
    value = str(text).replace("|", "\\|").replace("\n", "\\n")
    return value if len(value) <= 160 else value[:157] + "..."


def table(header: list[str], rows: Iterable[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def diff_row(diff: Difference) -> list[object]:
    return [diff.case, diff.aspect, f"`{diff.path}`" if diff.path else "", diff.oracle, diff.sim]


def render_markdown(info: RunInfo, results: list[CaseResult], verdict: Verdict) -> str:
    lines = [f"# Conformance: vllm-sim against vLLM {info.oracle_version}", ""]
    lines += summary_lines(info, results, verdict)
    lines += ["", "## Unexpected differences, grouped", ""]
    lines += grouped(verdict.unexpected) if verdict.unexpected else ["None."]
    header = ["case", "aspect", "path", "vLLM", "vllm-sim"]
    lines += ["", "## Accepted differences", ""]
    accepted_rows = [[*diff_row(d), entry.reason] for d, entry in verdict.accepted]
    lines += table([*header, "reason"], accepted_rows) if accepted_rows else ["None."]
    if verdict.stale:
        lines += ["", "## Accepted entries that matched nothing (stale)", ""]
        rows: list[list[object]] = [[e.case, e.aspect, e.path, e.reason] for e in verdict.stale]
        lines += table(["case", "aspect", "path", "reason"], rows)
    if verdict.unexpected:
        lines += ["", "## Unexpected differences, case by case", ""]
        lines += table(header, map(diff_row, verdict.unexpected))
    lines += ["", "## Cases", ""]
    lines += table(["case", "request", "vLLM", "vllm-sim", "differences"], map(case_row, results))
    lines += stream_sections(results)
    return "\n".join(lines) + "\n"


def grouped(diffs: list[Difference]) -> list[str]:
    """One row per distinct difference (aspect, path, both sides), with the cases showing it:
    a missing field shows once, not once per endpoint call."""
    cases: dict[tuple[str, str, str, str], list[str]] = {}
    for diff in diffs:
        cases.setdefault((diff.aspect, diff.path, diff.oracle, diff.sim), []).append(diff.case)
    rows: list[list[object]] = []
    for (aspect, path, oracle, sim), names in cases.items():
        unique = list(dict.fromkeys(names))
        shown = ", ".join(unique[:6]) + (f" (+{len(unique) - 6})" if len(unique) > 6 else "")
        rows.append([aspect, f"`{path}`" if path else "", oracle, sim, shown])
    return table(["aspect", "path", "vLLM", "vllm-sim", "cases"], rows)


def summary_lines(info: RunInfo, results: list[CaseResult], verdict: Verdict) -> list[str]:
    cases_with = {d.case for d in verdict.unexpected}
    timing = ", ".join(f"{k} {v:.0f} s" for k, v in info.seconds.items())
    lines = [
        f"Run {info.started}: {len(results)} cases; {timing}.",
        "",
        f"- **{len(verdict.unexpected)} unexpected differences** in {len(cases_with)} cases",
        f"- {len(verdict.accepted)} accepted differences",
        f"- {len(verdict.stale)} stale accepted entries",
    ]
    for name, command in info.commands.items():
        lines.append(f"- {name}: `{command}`")
    return lines


def case_row(result: CaseResult) -> list[object]:
    case = result.case
    return [
        case.name,
        f"{case.method} {case.path}",
        describe_answer(result.oracle),
        describe_answer(result.sim),
        len(result.differences),
    ]


def describe_answer(exchange: Exchange) -> str:
    if exchange.error:
        return exchange.error
    return f"{exchange.status} {body_kind(exchange)}"


def stream_sections(results: list[CaseResult]) -> list[str]:
    """For each stream that differs, both chunk sequences side by side, each chunk kind
    named by a letter with a legend."""
    lines: list[str] = []
    for result in results:
        if not result.differences or "sse" not in {
            body_kind(result.oracle),
            body_kind(result.sim),
        }:
            continue
        rules = rules_for(result.case)
        left = runs(parse_sse(result.oracle.body)[0], rules)
        right = runs(parse_sse(result.sim.body)[0], rules)
        labels: dict[Any, str] = {}
        lines += ["", f"### Stream `{result.case.name}`", ""]
        lines.append(f"- vLLM: {sequence(left, labels)}")
        lines.append(f"- vllm-sim: {sequence(right, labels)}")
        legend = {label: shape for shape, label in labels.items()}
        for label in sorted(legend, key=lambda x: (len(x), x)):
            lines.append(f"  - {label}: {summary(dict(legend[label]), limit=None)}")
    return lines


def sequence(items: list[Run], labels: dict[Any, str]) -> str:
    parts = []
    for run in items:
        label = labels.setdefault(run.shape, letter(len(labels)))
        parts.append(label if run.count == 1 else f"{label}x{run.count}")
    return " ".join(parts) or "(no events)"


def letter(index: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return alphabet[index] if index < len(alphabet) else f"Z{index}"


def render_json(info: RunInfo, results: list[CaseResult], verdict: Verdict) -> str:
    document = {
        "oracle_version": info.oracle_version,
        "started": info.started,
        "seconds": info.seconds,
        "commands": info.commands,
        "unexpected": [d.as_dict() for d in verdict.unexpected],
        "accepted": [{**d.as_dict(), "reason": e.reason} for d, e in verdict.accepted],
        "stale": [e.__dict__ for e in verdict.stale],
        "cases": [
            {
                "name": r.case.name,
                "request": f"{r.case.method} {r.case.path}",
                "oracle": describe_answer(r.oracle),
                "sim": describe_answer(r.sim),
                "differences": len(r.differences),
            }
            for r in results
        ],
    }
    return json.dumps(document, indent=2) + "\n"
