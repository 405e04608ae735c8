"""The server-side ranges and probabilities that shape generated values."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SynthesisSettings:
    """Server-side ranges and probabilities; the probabilities are percentages 0..100."""

    min_integer: int = 0
    max_integer: int = 100
    min_number: float = 0.0
    max_number: float = 100.0
    min_items: int = 1
    max_items: int = 5
    optional_param_probability: int = 50  # optional properties of the root (tool parameters)
    optional_field_probability: int = 50  # optional properties of nested objects
    extra_call_probability: int = 45  # not read here: callers that count tool calls use it
