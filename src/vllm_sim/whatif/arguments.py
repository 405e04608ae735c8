"""Arguments of the what-if commands: value types (a bad value is argparse's one-line
error), and reading a server flag's value from the flags passed through."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse, its refusals one line on stderr (the usage in brackets), status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (usage: {self.usage})", file=sys.stderr)
        raise SystemExit(2)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An integer from `low` to `high`: argparse's one-line error outside them."""

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {value}")
        return value

    parse.__name__ = "integer"  # argparse's "invalid integer value" for a non-number
    return parse


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """A finite number from `low` to `high`: argparse's one-line error outside them."""

    def parse(text: str) -> float:
        value = float(text)
        if not low <= value <= high:  # NaN included
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g}, not {text}")
        return value

    parse.__name__ = "number"
    return parse


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
