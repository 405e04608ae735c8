"""Reducing a schema to one without `$ref`, `allOf` and `anyOf` at its top level."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from .context import Ctx, SynthesisError, fail
from .cost import cost
from .keywords import schema_list
from .limits import SynthesisTooExpensive, check_deadline
from .merge import merge, normalize
from .refs import follow_ref

_MAX_FLATTEN_STEPS: Final = 256  # bounds `$ref` chains that never reach a real schema
_COST_BUDGET: Final = 4  # how deep the static cost estimate looks


class Flattener:
    """Resolves references, merges `allOf` and draws `anyOf` branches of one root schema."""

    def __init__(self, rng: random.Random, root: Any) -> None:
        self._rng = rng
        self._root = root
        self.choices: list[tuple[int, int]] = []  # (id of the branch list, index) drawn
        self._excluded: set[tuple[int, int]] = set()  # branches known to fail

    def exclude(self, choice: tuple[int, int]) -> None:
        """Leaves a branch that failed out of later draws."""
        self._excluded.add(choice)

    def flatten(self, schema: Any, ctx: Ctx, *, keep_one_of: bool) -> tuple[Mapping[str, Any], Ctx]:
        """Resolve `$ref`, merge `allOf` and pick `anyOf` (and `oneOf` unless kept) until
        the schema has none of them at its top level."""
        for _ in range(_MAX_FLATTEN_STEPS):
            check_deadline(ctx.path)
            if schema is True:
                return {}, ctx
            if schema is False:
                raise fail("schema false admits no value", ctx)
            if not isinstance(schema, Mapping):
                raise fail(f"schema must be an object, got {type(schema).__name__}", ctx)
            schema = normalize(schema)
            if "$ref" in schema:
                schema, ctx = follow_ref(self._root, schema, ctx)
            elif "allOf" in schema:
                schema, ctx = self._all_of(schema, ctx)
            elif "anyOf" in schema:
                schema, ctx = self._pick_branch(schema, "anyOf", ctx)
            elif "oneOf" in schema and not keep_one_of:
                schema, ctx = self._pick_branch(schema, "oneOf", ctx)
            else:
                return schema, ctx
        raise fail("schema references do not reach a schema", ctx)

    def branch_order(self, branches: Sequence[Any], ctx: Ctx) -> list[int]:
        """Indices to try: cheapest first when minimal, else a uniform pick first."""
        if ctx.minimal:
            costs = [cost(self._root, branch, _COST_BUDGET) for branch in branches]
            return sorted(range(len(branches)), key=lambda i: costs[i])
        first = self._rng.randrange(len(branches))
        return [first, *(i for i in range(len(branches)) if i != first)]

    def _all_of(self, schema: Mapping[str, Any], ctx: Ctx) -> tuple[Mapping[str, Any], Ctx]:
        branches = schema_list(schema, "allOf", ctx)
        merged: Mapping[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        depth = ctx.depth
        for index, branch in enumerate(branches):
            flat, branch_ctx = self.flatten(branch, ctx.at(f".allOf[{index}]"), keep_one_of=False)
            merged = merge(merged, flat, ctx)
            depth = max(depth, branch_ctx.depth)
        return merged, replace(ctx, depth=depth)

    def _pick_branch(
        self, schema: Mapping[str, Any], key: str, ctx: Ctx
    ) -> tuple[Mapping[str, Any], Ctx]:
        branches = schema_list(schema, key, ctx)
        key_id = id(branches)
        order = [i for i in self.branch_order(branches, ctx) if (key_id, i) not in self._excluded]
        rest = {k: v for k, v in schema.items() if k != key}
        first_error: SynthesisError | None = None
        for index in order:  # the drawn branch, then the others if it cannot be flattened
            branch_ctx = replace(ctx.at(f".{key}[{index}]"), null_ok=True)
            try:
                flat, branch_ctx = self.flatten(branches[index], branch_ctx, keep_one_of=True)
                merged = merge(rest, flat, ctx)
            except SynthesisTooExpensive:
                raise
            except SynthesisError as error:
                first_error = first_error or error
                self._excluded.add((key_id, index))
                continue
            self.choices.append((key_id, index))
            return merged, branch_ctx
        if first_error is not None and len(order) == 1:
            raise first_error
        raise fail(f"no {key} branch can be satisfied", ctx)
