"""`vllm-sim compare A B`: two runs' means side by side, with their units and B's ratio to
A's; then the settings the runs differ in, and a warning when they did not serve the same
number of requests (their means then describe different workloads)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_sim.whatif.output import read_result

Row = tuple[str, str, float | None, float | None, float | None]

# The unit each mean is shown in, and its factor from the result's own unit (seconds,
# fractions): latencies in milliseconds, the hit rate in percent.
_LATENCIES = ("ttft", "itl", "e2e", "queue_time")
_UNITS: dict[str, tuple[str, float]] = {
    "request_throughput": ("req/s", 1.0),
    "output_throughput": ("tok/s", 1.0),
    "input_throughput": ("tok/s", 1.0),
    "prefix_cache_hit_rate": ("%", 100.0),
}


def unit_of(name: str) -> tuple[str, float]:
    """The unit a mean is shown in and the factor that converts it there."""
    if name in _UNITS:
        return _UNITS[name]
    if name.startswith(_LATENCIES):
        return "ms", 1000.0
    return "", 1.0


def checked_means(result: Mapping[str, Any], label: str) -> dict[str, float | None]:
    """The result's means, each a number or null; ValueError naming the first that is not."""
    means = result["means"]
    for name, value in means.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if value is not None and not number:
            raise ValueError(f"{label}: means.{name} is {value!r}, not a number")
    return dict(means)


def comparison(first: dict[str, Any], second: dict[str, Any]) -> list[Row]:
    """(metric, unit, A, B, B/A) for every mean either run reports, in A's order, each in
    its unit."""
    a, b = checked_means(first, "A"), checked_means(second, "B")
    names = list(a) + [name for name in b if name not in a]
    table: list[Row] = []
    for name in names:
        unit, factor = unit_of(name)
        left, right = a.get(name), b.get(name)
        ratio = right / left if left is not None and right is not None and left else None
        table.append(
            (
                name,
                unit,
                None if left is None else left * factor,
                None if right is None else right * factor,
                ratio,
            )
        )
    return table


def format_table(rows: list[Row], names: tuple[str, str]) -> str:
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    header = ("metric", "unit", names[0], names[1], "B/A")
    lines = [header, *((n, u, cell(a), cell(b), cell(r)) for n, u, a, b, r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    return "\n".join(
        "  ".join(
            text.ljust(w) if i < 2 else text.rjust(w)
            for i, (text, w) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )


def setting_differences(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[str]:
    """`name: A -> B` for every setting the two runs do not share."""
    a, b = first.get("settings"), second.get("settings")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return []
    missing = "(not set)"
    return [
        f"{name}: {a.get(name, missing)} -> {b.get(name, missing)}"
        for name in sorted(set(a) | set(b))
        if a.get(name, missing) != b.get(name, missing)
    ]


def _requests(result: Mapping[str, Any]) -> int | None:
    summary = result.get("summary")
    count = summary.get("requests") if isinstance(summary, Mapping) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def compare(first: Path, second: Path) -> str:
    """The comparison of two result files (or folders): the table, the settings that
    differ, and a warning if the request counts do; ValueError naming a bad file or
    field."""
    a, b = read_result(first), read_result(second)
    try:
        table = comparison(a, b)
    except ValueError as error:
        side, _, rest = str(error).partition(": ")
        raise ValueError(f"{first if side == 'A' else second}: {rest}") from None
    lines = [format_table(table, (f"A: {first}", f"B: {second}"))]
    differences = setting_differences(a, b)
    lines.append("")
    if differences:
        lines.append("settings that differ (A -> B):")
        lines += [f"  {line}" for line in differences]
    else:
        lines.append("settings: the same")
    count_a, count_b = _requests(a), _requests(b)
    if count_a is not None and count_b is not None and count_a != count_b:
        lines.append(
            f"warning: A served {count_a} requests and B {count_b}: their means describe "
            "different workloads"
        )
    return "\n".join(lines)
