"""The vocabulary of generated strings."""

from __future__ import annotations

from typing import Final

WORDS: Final[tuple[str, ...]] = (
    "testing",
    "hello",
    "Boston",
    "sunny",
    "temperature",
    "cloudy",
    "question",
    "Yorick",
    "silence",
    "lifetime",
)
