"""A static size estimate of a schema's smallest value, to pick the shortest branch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .context import DETACHED, SynthesisError
from .keywords import TYPE_COST, type_list
from .limits import check_deadline
from .refs import resolve

_MAX_ESTIMATE_DEPTH = 32  # nesting the size estimate follows (recursive schemas)


def cost(root: Any, schema: Any, budget: int) -> int:
    """A rough size of the smallest value of `schema`; `budget` bounds how deep it looks,
    not how wide: a `$ref` to an `anyOf` of `$ref`s back to it is n^budget calls."""
    check_deadline()
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


def min_values(root: Any, schema: Any, steps: list[int], depth: int = 0) -> int:
    """A lower bound on how many values (nested ones included) any value of `schema` that
    the walk generates has. `steps` is a work budget shared by the whole estimate: once it
    is spent, each remaining subschema counts as 1, which keeps the result a lower bound."""
    steps[0] -= 1
    if steps[0] <= 0 or depth > _MAX_ESTIMATE_DEPTH or not isinstance(schema, Mapping):
        return 1
    depth += 1
    if "$ref" in schema:
        try:
            target, _ = resolve(root, schema["$ref"], DETACHED)
        except SynthesisError:
            return 1
        return min_values(root, target, steps, depth)
    if "const" in schema or "enum" in schema:
        return 1
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return min(min_values(root, b, steps, depth) for b in branches)
    least = 1
    branches = schema.get("allOf")
    if isinstance(branches, list) and branches:
        least = max(min_values(root, b, steps, depth) for b in branches)
    count = schema.get("minItems")
    if isinstance(count, int) and count > 0 and "array" in type_list(schema.get("type")):
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(prefix, list) or isinstance(items, list):
            return least  # tuples: not estimated
        if all(isinstance(t, str) and t == "array" for t in type_list(schema.get("type"))):
            least = max(least, 1 + count * min_values(root, items, steps, depth))
    required = schema.get("required")
    properties = schema.get("properties")
    if isinstance(required, list) and isinstance(properties, Mapping):
        types = type_list(schema.get("type", "object"))
        if types == ["object"]:
            names = [n for n in required if isinstance(n, str)]
            total = 1 + sum(min_values(root, properties.get(n, True), steps, depth) for n in names)
            least = max(least, total)
    return least
