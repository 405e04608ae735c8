"""Arguments of the what-if commands: value types (a bad value is argparse's one-line
error), and reading a server flag's value from the flags passed through."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NoReturn

from vllm_sim.config import Config
from vllm_sim.config.argv import find_config_path
from vllm_sim.config.yaml_source import load_yaml_file


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


# vLLM has no waiting-queue cap; the server's --max-waiting-queue-length defaults to the
# reference's 1,000. Offline runs lift it to the setting's maximum unless it is set.
OFFLINE_WAITING_QUEUE = 10_000_000
_WAITING_FLAGS = ("--max-waiting-queue-length", "--max_waiting_queue_length")


def offline_config(cfg: Config, flags: Sequence[str]) -> Config:
    """`cfg` as a replay or a plan uses it: with vLLM's unbounded waiting queue unless the
    flags (or their --config file) set --max-waiting-queue-length."""
    if any(flag_value(flags, name) is not None for name in _WAITING_FLAGS):
        return cfg
    path = find_config_path(list(flags))
    if path is not None and "max_waiting_queue_length" in load_yaml_file(path).values:
        return cfg
    return replace(cfg, max_waiting_queue_length=OFFLINE_WAITING_QUEUE)


def flag_value(flags: Sequence[str], name: str) -> str | None:
    """A server flag's value as given (`--name value` or `--name=value`), if any."""
    for i, flag in enumerate(flags):
        if flag == name and i + 1 < len(flags):
            return flags[i + 1]
        if flag.startswith(name + "="):
            return flag.split("=", 1)[1]
    return None
