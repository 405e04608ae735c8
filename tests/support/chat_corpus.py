"""A corpus of chat conversations for tokenizer parity tests: multi-turn, with and without
a system prompt, tools, tool calls and their results, and Unicode text.

Each conversation comes twice: as a client sends it (OpenAI's wire shape, tool-call
arguments as JSON text) and as a chat template receives it (arguments parsed to objects,
tools with every field of the function, as vLLM hands them to the template).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Final

TEXTS: Final = (
    "Hello there, how are you?",
    "What's the weather like in Paris today?",
    "Héllo wörld, ça va? Übermäßig schön!",
    "你好，世界。今天天气很好。",
    "Emoji test: 🙂🚀🎉 and a flag 🇫🇷.",
    "Ответь кратко: сколько будет 2+2?",
    "  leading and trailing spaces  ",
    "Tabs\tand\nnewlines\n\nin the middle.",
    'Code: `def f(x): return x ** 2` and {"json": [1, 2, 3]}',
    "مرحبا بالعالم",
    "A very long sentence " * 12,
    "<|im_start|> looks special but is typed by the user",
)
SYSTEMS: Final = ("You are a terse assistant.", "Réponds en français.", "系统提示：简短回答。")
TOOLS: Final = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["C", "F"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    },
)


Messages = list[dict[str, Any]]


@dataclass(frozen=True)
class Conversation:
    wire: list[dict[str, Any]]  # what the client sends
    template: list[dict[str, Any]]  # what the template receives
    tools: list[dict[str, Any]] | None  # the request's tools, as sent
    template_tools: list[dict[str, Any]] | None  # as the template receives them


def _template_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool["function"]["name"],
                "description": tool["function"].get("description"),
                "parameters": tool["function"].get("parameters"),
            },
        }
        for tool in tools
    ]


def _tool_exchange(
    rng: random.Random, index: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    arguments = {"city": rng.choice(["Paris", "Zürich", "東京"]), "unit": "C"}
    call = {"id": f"call_{index}", "type": "function"}
    wire_call = {**call, "function": {"name": "get_weather", "arguments": json.dumps(arguments)}}
    template_call = {**call, "function": {"name": "get_weather", "arguments": arguments}}
    result: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": f"call_{index}",
        "content": "Sunny, 21°C",
    }
    wire: Messages = [{"role": "assistant", "content": None, "tool_calls": [wire_call]}, result]
    template: Messages = [
        {"role": "assistant", "content": "", "tool_calls": [template_call]},
        result,
    ]
    return wire, template


def conversation(rng: random.Random, index: int) -> Conversation:
    wire: list[dict[str, Any]] = []
    template: list[dict[str, Any]] = []
    if index % 3:
        system = {"role": "system", "content": rng.choice(SYSTEMS)}
        wire.append(system)
        template.append(system)
    with_tools = index % 4 == 0
    for turn in range(1 + index % 3):
        user = {"role": "user", "content": rng.choice(TEXTS)}
        wire.append(user)
        template.append(user)
        if with_tools and turn == 0:
            sent, received = _tool_exchange(rng, index)
            wire += sent
            template += received
        if turn < index % 3:
            answer = {"role": "assistant", "content": rng.choice(TEXTS)}
            wire.append(answer)
            template.append(answer)
    if template[-1]["role"] != "user" and template[-1]["role"] != "tool":
        last = {"role": "user", "content": rng.choice(TEXTS)}
        wire.append(last)
        template.append(last)
    tools = list(TOOLS) if with_tools else None
    return Conversation(wire, template, tools, _template_tools(tools) if tools else None)


def corpus(count: int = 60, seed: int = 7) -> list[Conversation]:
    rng = random.Random(seed)
    return [conversation(rng, index) for index in range(count)]
