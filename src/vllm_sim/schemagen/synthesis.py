"""The walk over a schema: `oneOf`, then a value of one of the allowed types."""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from typing import Any, Final

from .arrays import array_value
from .context import Ctx, SynthesisError, fail, unsupported_type
from .flatten import Flattener
from .keywords import TYPE_COST, TYPES, enum_values, schema_list
from .limits import (
    SynthesisTooExpensive,
    budgeted,
    check_deadline,
    count_value,
    start_budget,
)
from .matching import Matcher
from .merge import merge
from .numbers import integer_value, number_value
from .objects import object_value
from .settings import SynthesisSettings
from .strings import string_value
from .words import WORDS

_ONE_OF_ATTEMPTS: Final = 8


def synthesize(
    rng: random.Random,
    schema: Mapping[str, Any],
    settings: SynthesisSettings,
    *,
    top_level: bool = True,
) -> Any:
    """A value for `schema`. With `top_level`, the root object's optional properties use
    `optional_param_probability` (tool parameters); nested ones use
    `optional_field_probability`. Raises `SynthesisError` for schemas we cannot satisfy."""
    with budgeted():
        start_budget()
        return _Synthesizer(rng, schema, settings).generate(
            schema, Ctx(path="$", depth=0, top=top_level, null_ok=False)
        )


class _Synthesizer:
    def __init__(
        self, rng: random.Random, root: Mapping[str, Any], settings: SynthesisSettings
    ) -> None:
        self._rng = rng
        self._root = root
        self._settings = settings
        self._flattener = Flattener(rng, root)
        self._matcher = Matcher(root)
        # enum values the rest of a schema allows, by id of that schema (kept alive, so
        # the id is not reused): the items of an array share one, and filtering a
        # 4,000-value enum for each of 100 items would cost more than the deadline.
        self._enums: dict[int, tuple[Mapping[str, Any], list[Any]]] = {}

    def generate(self, schema: Any, ctx: Ctx) -> Any:
        count_value(ctx.path)
        if schema is True:
            return self._rng.choice(WORDS)  # any value validates; a word is the cheapest
        # An anyOf branch that cannot be satisfied is left out and the walk retried, so the
        # outcome does not depend on the draw; every retry excludes one more branch.
        choices = self._flattener.choices
        while True:
            mark = len(choices)
            flat, flat_ctx = self._flattener.flatten(schema, ctx, keep_one_of=True)
            made = choices[mark:]
            try:
                if "oneOf" in flat:
                    return self._one_of(flat, flat_ctx)
                return self._generate_flat(flat, flat_ctx)
            except SynthesisTooExpensive:
                raise
            except SynthesisError:
                if not made:
                    raise
                self._flattener.exclude(made[-1])
            finally:
                del choices[mark:]

    def _one_of(self, schema: Mapping[str, Any], ctx: Ctx) -> Any:
        # A value that also matches another branch would fail oneOf: regenerate it, then
        # fall back to other branches; after that, emit the last value (best effort).
        branches = schema_list(schema, "oneOf", ctx)
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        # A branch that cannot be satisfied is skipped (SynthesisError: none can be).
        value: Any = None
        failed: dict[int, SynthesisError] = {}
        found = False
        for attempt in range(_ONE_OF_ATTEMPTS):
            check_deadline(ctx.path)
            order = [i for i in self._flattener.branch_order(branches, ctx) if i not in failed]
            if not order:
                break
            index = order[attempt % len(order)] if ctx.minimal else order[0]
            branch_ctx = ctx.branch(f".oneOf[{index}]")
            try:
                flat, branch_ctx = self._flattener.flatten(
                    branches[index], branch_ctx, keep_one_of=True
                )
                value = self.generate(merge(rest, flat, ctx), branch_ctx)
            except SynthesisTooExpensive:
                raise
            except SynthesisError as error:
                failed[index] = error
                continue
            found = True
            others = (b for i, b in enumerate(branches) if i != index)
            if not any(self._matcher.matches(value, other, 0) for other in others):
                return value
        if not found:
            if len(failed) == 1:
                raise next(iter(failed.values()))
            raise fail("no oneOf branch can be satisfied", ctx)
        return value

    def _generate_flat(self, schema: Mapping[str, Any], ctx: Ctx) -> Any:
        if "const" in schema:
            return _copy(schema["const"], ctx.path)
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            known = self._enums.get(id(schema))
            if known is None:
                known = self._enums[id(schema)] = (schema, enum_values(enum, schema, ctx))
            return _copy(self._rng.choice(known[1]), ctx.path)
        rng, settings = self._rng, self._settings
        kind = _pick_type(rng, schema, ctx)
        if kind == "null":
            return None
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "integer":
            return integer_value(rng, schema, settings, ctx)
        if kind == "number":
            return number_value(rng, schema, settings, ctx)
        if kind == "string":
            return string_value(rng, schema, ctx)
        if kind == "array":
            return array_value(rng, schema, settings, ctx, self.generate, self._root)
        return object_value(rng, schema, settings, ctx, self.generate)


def _copy(value: Any, path: str) -> Any:
    """A copy of a `const` or `enum` value, so that no caller can change the schema. Each
    nested value counts against `MAX_NODES`: a big `const` as the items of an array would
    otherwise be copied a hundred times, out of reach of the deadline."""
    count_value(path)
    if isinstance(value, dict):
        return {key: _copy(item, path) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item, path) for item in value]
    if value is None or isinstance(value, str | int | float):
        return value
    return copy.deepcopy(value)  # not from JSON: a schema built in Python


def _pick_type(rng: random.Random, schema: Mapping[str, Any], ctx: Ctx) -> str:
    raw = schema.get("type")
    if raw is None:
        if "properties" in schema:
            return "object"
        raise unsupported_type(None, ctx)
    if isinstance(raw, str):
        names = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(t, str) for t in raw):
        names = list(dict.fromkeys(raw))
    else:
        raise unsupported_type(raw, ctx)
    known = [t for t in names if t in TYPES]
    if not known:
        raise unsupported_type(names[0], ctx)
    if len(known) == 1:
        # A lone `null` type is an error, as llm-d-inference-sim rejects such tool
        # parameters; null is fine as one of several alternatives (type array, anyOf/oneOf).
        if known[0] == "null" and len(names) == 1 and not ctx.null_ok:
            raise unsupported_type("null", ctx)
        return known[0]
    if ctx.minimal:
        return min(known, key=TYPE_COST.__getitem__)
    return rng.choice(known)
