"""Arguments of the what-if commands: value types (a bad value is argparse's one-line
error), and reading a server flag's value from the flags passed through."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def flag_value(flags: Sequence[str], name: str) -> str | None:
    """A server flag's value as given (`--name value` or `--name=value`), if any."""
    for i, flag in enumerate(flags):
        if flag == name and i + 1 < len(flags):
            return flags[i + 1]
        if flag.startswith(name + "="):
            return flag.split("=", 1)[1]
    return None
