"""Prometheus text exposition (format 0.0.4) of the simulator's metric families."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

Sample = tuple[tuple[str, ...], float]


def format_value(value: float) -> str:
    """Prometheus's float syntax: integers without a fraction, +Inf/-Inf/NaN spelled out."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass(frozen=True, slots=True)
class CallbackGauge:
    """A gauge family whose samples are read from live state at scrape time.

    Reading at scrape time costs the request path nothing and can never drift from the
    state it reports.
    """

    name: str
    help: str
    label_names: tuple[str, ...]
    samples: Callable[[], Iterable[Sample]]

    def render(self, out: list[str]) -> None:
        rows = list(self.samples())
        if not rows:
            return  # an empty family is not exposed (as vLLM's client library does)
        out.append(f"# HELP {self.name} {self.help}")
        out.append(f"# TYPE {self.name} gauge")
        for labels, value in rows:
            pairs = ",".join(
                f'{k}="{_escape(v)}"' for k, v in zip(self.label_names, labels, strict=True)
            )
            suffix = f"{{{pairs}}}" if pairs else ""
            out.append(f"{self.name}{suffix} {format_value(value)}")


class Registry:
    """The families one engine exposes on /metrics, in registration order."""

    def __init__(self) -> None:
        self._families: list[CallbackGauge] = []

    def register(self, family: CallbackGauge) -> None:
        self._families.append(family)

    def render(self) -> bytes:
        out: list[str] = []
        for family in self._families:
            family.render(out)
        return ("\n".join(out) + "\n").encode() if out else b""
