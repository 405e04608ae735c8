"""Prometheus text exposition (format 0.0.4), written the way vLLM's client library writes it."""

from __future__ import annotations

from typing import Protocol

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


def format_value(value: float) -> str:
    """A sample value or `le` bound as vLLM prints it (`0.0`, `1.0`, `0.001`, `2e+06`).

    vLLM exposes through prometheus_client, which prints Python floats but switches to
    Go's exponent form once a number has more than six digits before the point.
    """
    value = float(value)
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "+Inf"
    if value == float("-inf"):
        return "-Inf"
    text = repr(value)
    point = text.find(".")
    if value > 0 and point > 6:
        mantissa = f"{text[0]}.{text[1:point]}{text[point + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{point - 1}"
    return text


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_text(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """`name="value",...` in the given order (the families keep vLLM's label order)."""
    return ",".join(f'{k}="{escape_label(v)}"' for k, v in zip(names, values, strict=True))


class Family(Protocol):
    """One metric family: writes its HELP, TYPE and samples, or nothing when it has none."""

    name: str

    def render(self, out: list[str]) -> None: ...


class Registry:
    """The families one engine exposes on /metrics, in registration order."""

    def __init__(self) -> None:
        self._families: list[Family] = []

    def register(self, family: Family) -> None:
        self._families.append(family)

    def render(self) -> bytes:
        out: list[str] = []
        for family in self._families:
            family.render(out)
        return ("\n".join(out) + "\n").encode() if out else b""
