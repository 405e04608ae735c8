"""The two ways configuration loading stops early."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad flags, YAML, environment or admin update; `str(error)` is the one-line reason.

    The caller prints it and exits non-zero (the reference exits 0 here, a bug we fix).
    """


class HelpRequested(Exception):
    """`-h` / `--help`: `text` is the usage to print before exiting 0."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
