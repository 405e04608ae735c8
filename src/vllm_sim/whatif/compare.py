"""`vllm-sim compare A B`: two runs' means side by side, with B's ratio to A's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_sim.whatif.output import read_result


def comparison(
    first: dict[str, Any], second: dict[str, Any]
) -> list[tuple[str, float | None, float | None, float | None]]:
    """(metric, A, B, B/A) for every mean either run reports, in A's order."""
    a, b = first["means"], second["means"]
    names = list(a) + [name for name in b if name not in a]
    table = []
    for name in names:
        left, right = a.get(name), b.get(name)
        ratio = (
            right / left
            if isinstance(left, (int, float)) and isinstance(right, (int, float)) and left
            else None
        )
        table.append((name, left, right, ratio))
    return table


def format_table(
    rows: list[tuple[str, float | None, float | None, float | None]], names: tuple[str, str]
) -> str:
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    header = ("metric", names[0], names[1], "B/A")
    lines = [header, *((name, cell(a), cell(b), cell(r)) for name, a, b, r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    return "\n".join(
        "  ".join(
            text.ljust(w) if i == 0 else text.rjust(w)
            for i, (text, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def compare(first: Path, second: Path) -> str:
    """The comparison table of two result files (or folders); ValueError for a bad one."""
    table = comparison(read_result(first), read_result(second))
    return format_table(table, (f"A: {first}", f"B: {second}"))
