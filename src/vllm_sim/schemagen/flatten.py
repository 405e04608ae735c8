"""Reducing a schema to one without `$ref`, `allOf` and `anyOf` at its top level."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from .context import Ctx, SynthesisError, fail
from .cost import cost
from .keywords import schema_list
from .limits import SynthesisTooExpensive, check_deadline, paced
from .merge import merge, normalize
from .refs import follow_ref

_MAX_FLATTEN_STEPS: Final = 256  # bounds `$ref` chains that never reach a real schema
_COST_BUDGET: Final = 4  # how deep the static cost estimate looks


class _Branches:
    """The branches of one `anyOf`/`oneOf` list not yet known to fail, drawn and removed in
    O(1), so that a thousand unsatisfiable branches cost a thousand cheap attempts."""

    def __init__(self, branches: Sequence[Any]) -> None:
        self.branches = branches  # kept alive: its id keys this record
        self.left = list(range(len(branches)))  # in no particular order
        self._position = list(range(len(branches)))  # index -> place in `left`, -1: removed
        self._by_cost: list[int] | None = None  # built on the first cheapest draw
        self._next_cheapest = 0

    def remove(self, index: int) -> None:
        place = self._position[index]
        if place < 0:
            return
        last = self.left.pop()
        if last != index:
            self.left[place] = last
            self._position[last] = place
        self._position[index] = -1

    def random(self, rng: random.Random) -> int | None:
        return self.left[rng.randrange(len(self.left))] if self.left else None

    def cheapest(self, cost_of: Callable[[Any], int]) -> int | None:
        if self._by_cost is None:
            costs = [cost_of(branch) for branch in paced(self.branches)]
            self._by_cost = sorted(range(len(costs)), key=costs.__getitem__)
        order = self._by_cost
        while self._next_cheapest < len(order) and self._position[order[self._next_cheapest]] < 0:
            self._next_cheapest += 1  # removed branches never come back: a cursor suffices
        return order[self._next_cheapest] if self._next_cheapest < len(order) else None


class Flattener:
    """Resolves references, merges `allOf` and draws `anyOf` branches of one root schema."""

    def __init__(self, rng: random.Random, root: Any) -> None:
        self._rng = rng
        self._root = root
        self.choices: list[tuple[int, int]] = []  # (id of the branch list, index) drawn
        self._lists: dict[int, _Branches] = {}  # by id of the branch list

    def exclude(self, choice: tuple[int, int]) -> None:
        """Leaves a branch that failed out of later draws."""
        list_id, index = choice
        self._lists[list_id].remove(index)

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
        record = self._lists.get(id(branches))
        if record is None:
            record = self._lists[id(branches)] = _Branches(branches)
        candidates = len(record.left)
        rest = {k: v for k, v in schema.items() if k != key}
        first_error: SynthesisError | None = None
        # A drawn branch that cannot be flattened is left out and another one drawn.
        while (index := self._draw(record, ctx)) is not None:
            branch_ctx = ctx.branch(f".{key}[{index}]")
            try:
                flat, branch_ctx = self.flatten(branches[index], branch_ctx, keep_one_of=True)
                merged = merge(rest, flat, ctx)
            except SynthesisTooExpensive:
                raise
            except SynthesisError as error:
                first_error = first_error or error
                record.remove(index)
                continue
            self.choices.append((id(branches), index))
            return merged, branch_ctx
        if first_error is not None and candidates == 1:
            raise first_error
        raise fail(f"no {key} branch can be satisfied", ctx)

    def _draw(self, record: _Branches, ctx: Ctx) -> int | None:
        """The cheapest branch left when minimal (as `branch_order`), else a uniform one."""
        if ctx.minimal:
            return record.cheapest(lambda branch: cost(self._root, branch, _COST_BUDGET))
        return record.random(self._rng)
