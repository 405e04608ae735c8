"""Run-wide options and the request bodies every benchmark shares."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

MODEL = "bench-model"


@dataclass(frozen=True, slots=True)
class Options:
    quick: bool = False
    model: str = MODEL
    base: str = "HEAD~1"  # the commit the instruction counts are compared with

    def plan(
        self, full: tuple[float, float, int], quick: tuple[float, float, int]
    ) -> tuple[float, float, int]:
        """(warm-up seconds, measured seconds, rounds) for this run's mode."""
        return quick if self.quick else full


def chat_body(model: str, max_tokens: int, stream: bool = False) -> str:
    """The chat completion request every benchmark POSTs, as JSON text."""
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
        body["ignore_eos"] = True
    return msgspec.json.encode(body).decode()
