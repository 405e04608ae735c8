"""Tool calls on the engine's side: what a request allows (ToolPlan), how many calls an
answer makes, which tools they call, and the calls themselves as output tokens.

The arguments are JSON values generated from each tool's schema by `vllm_sim.schemagen`;
the protocols only parse `tools` and `tool_choice` into a ToolPlan and frame the calls.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.schemagen import SynthesisSettings


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """The tools a sequence may call, each as (name, JSON Schema of its arguments)."""

    tools: tuple[tuple[str, Mapping[str, Any]], ...]
    forced: bool  # `required` or a named tool: at least one call
    max_calls: int | None = None  # the Responses API answers with one call at most


@dataclass(frozen=True, slots=True)
class ToolCallOutput:
    """One generated tool call: its output tokens are [start, end) of the sequence's."""

    id: str  # 16 hex characters; each protocol adds its prefix (chatcmpl-tool-, call_, toolu_)
    name: str
    arguments: str
    start: int
    end: int


@dataclass(slots=True)
class ToolCalls:
    """An answer made of tool calls: the calls, and their argument tokens in order."""

    calls: list[ToolCallOutput]
    token_ids: list[int]
    pieces: list[str]


def call_count(
    rng: random.Random, candidates: int, forced: bool, settings: SynthesisSettings
) -> int:
    """How many tool calls: 1 when forced (`required` or a named tool) else 0, plus one per
    successful extra-call draw while fewer than `candidates`."""
    if candidates < 1:
        raise ValueError("no tools available to create tool calls")
    count = 1 if forced else 0
    while count < candidates and rng.random() < settings.extra_call_probability / 100:
        count += 1
    return count


def pick_tools(rng: random.Random, names: Sequence[str], count: int) -> list[str]:
    """`count` tool names, uniform with replacement; a single candidate consumes no draw."""
    if not names:
        raise ValueError("no tools available to create tool calls")
    if len(names) == 1:
        return [names[0]] * count
    return [rng.choice(names) for _ in range(count)]


def make_tool_calls(
    rng: random.Random,
    plan: ToolPlan,
    settings: SynthesisSettings,
    tokenizer: Tokenizer,
    arguments: Callable[[Mapping[str, Any], str], str],
) -> ToolCalls | None:
    """The calls an answer makes under `plan`, or None when it is to answer in text.

    `arguments(schema, tool_name)` gives one call's arguments as JSON text."""
    count = call_count(rng, len(plan.tools), plan.forced, settings)
    if plan.max_calls is not None:
        count = min(count, plan.max_calls)
    if count == 0:
        return None
    schemas = dict(plan.tools)
    made = ToolCalls([], [], [])
    for name in pick_tools(rng, [name for name, _ in plan.tools], count):
        text = arguments(schemas[name], name)
        ids, pieces = tokenizer.tokenize(text)
        call_id = f"{rng.getrandbits(64):016x}"  # each protocol prefixes its own
        start = len(made.token_ids)
        made.calls.append(ToolCallOutput(call_id, name, text, start, start + len(ids)))
        made.token_ids += ids
        made.pieces += pieces
    return made
