"""A static size estimate of a schema's smallest value, to pick the shortest branch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .context import DETACHED, SynthesisError
from .keywords import TYPE_COST, type_list
from .refs import resolve


def cost(root: Any, schema: Any, budget: int) -> int:
    """A rough size of the smallest value of `schema`; `budget` bounds how deep it looks."""
    if schema is True:
        return 1
    if not isinstance(schema, Mapping):
        return 1000
    if budget <= 0:
        return 100
    if "$ref" in schema:
        try:
            target, _ = resolve(root, schema["$ref"], DETACHED)
        except SynthesisError:
            return 1000
        return 5 + cost(root, target, budget - 1)
    if "const" in schema or schema.get("enum"):
        return 0
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return min(cost(root, b, budget - 1) for b in branches)
    branches = schema.get("allOf")
    if isinstance(branches, list) and branches:
        return sum(cost(root, b, budget - 1) for b in branches)
    return _type_cost(root, schema, budget)


def _type_cost(root: Any, schema: Mapping[str, Any], budget: int) -> int:
    raw = schema.get("type", "object" if "properties" in schema else None)
    known = [t for t in type_list(raw) if t in TYPE_COST]
    if not known:
        return 50
    kind = min(known, key=TYPE_COST.__getitem__)
    total = TYPE_COST[kind]
    if kind == "array":
        count = schema.get("minItems") or 0
        if count:
            total += count * cost(root, schema.get("items", True), budget - 1)
    elif kind == "object":
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            total += cost(root, properties.get(name, True), budget - 1)
    return total
