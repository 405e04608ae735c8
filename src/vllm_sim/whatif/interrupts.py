"""SIGINT and SIGTERM during an offline command: a run stops and keeps what it has.

While a stoppable stage runs (`Interrupts.stopping(stop)`), the first signal calls
`stop` (which only sets flags: the run returns within an event or a poll and its caller
writes a partial result) and a second one raises KeyboardInterrupt at once. Outside such
a stage, a signal raises KeyboardInterrupt as Python's default handler does (SIGTERM
included), so the command says it was interrupted instead of dying without a word.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Handlers for SIGINT and SIGTERM while the `with` block runs (main thread only)."""

    def __init__(self) -> None:
        self.signal: int | None = None  # the first signal received
        self._stop: Callable[[], None] | None = None
        self._saved: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return "SIGINT" if self.signal in (None, signal.SIGINT) else "SIGTERM"

    @property
    def exit_status(self) -> int:
        return 128 + (self.signal or signal.SIGINT)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        first = self.signal is None
        if first:
            self.signal = number
        stop = self._stop
        if not first or stop is None:
            raise KeyboardInterrupt
        stop()

    @contextmanager
    def stopping(self, stop: Callable[[], None]) -> Iterator[None]:
        """A stage the first signal stops by calling `stop` rather than raising."""
        self._stop = stop
        try:
            yield
        finally:
            self._stop = None

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for number in SIGNALS:
                self._saved[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *_: object) -> None:
        for number, handler in self._saved.items():
            signal.signal(number, handler)
        self._saved.clear()
