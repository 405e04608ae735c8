"""Array values: tuples (`prefixItems`), item counts and `uniqueItems`."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Final

from .context import Ctx, Generate, fail
from .cost import min_values
from .keywords import canonical, length, narrow
from .limits import MAX_ITEMS, MAX_NODES, SynthesisTooExpensive, shown
from .settings import SynthesisSettings

_UNIQUE_ATTEMPTS: Final = 10  # per optional element, before the array is shortened
_UNIQUE_ATTEMPTS_NEEDED: Final = 200  # per element that minItems requires
_ESTIMATE_STEPS: Final = 1000  # work bound of the static size estimate


def array_value(
    rng: random.Random,
    schema: Mapping[str, Any],
    settings: SynthesisSettings,
    ctx: Ctx,
    generate: Generate,
    root: Any = None,
) -> list[Any]:
    min_items = length(schema, "minItems", ctx)
    max_items = length(schema, "maxItems", ctx)
    if min_items is not None and max_items is not None and min_items > max_items:
        raise fail(
            f"minItems ({shown(min_items)}) is greater than maxItems({shown(max_items)})", ctx
        )
    if min_items is not None and min_items > MAX_ITEMS:
        raise fail(f"minItems ({shown(min_items)}) exceeds the limit of {MAX_ITEMS} items", ctx)
    prefix = schema.get("prefixItems")
    items = schema.get("items", True)
    if prefix is not None and not isinstance(prefix, list):
        raise fail("prefixItems must be an array of schemas", ctx)
    count = min(_item_count(rng, settings, ctx, prefix, min_items, max_items), MAX_ITEMS)
    if prefix is None and count:
        needed = count * min_values(root, items, [_ESTIMATE_STEPS])
        if needed > MAX_NODES:  # ten nested arrays of minItems 10: refused before the walk
            message = f"schema too expensive to generate ({count} items of at least"
            raise SynthesisTooExpensive(
                f"{message} {needed // count} values each, over {MAX_NODES}) at {ctx.path}"
            )
    unique = schema.get("uniqueItems") is True
    values: list[Any] = []
    seen: set[Any] = set()
    for index in range(count):
        if prefix is not None and index < len(prefix):
            sub, item_ctx = prefix[index], ctx.child(f".prefixItems[{index}]")
        elif items is False:
            raise fail(f"array needs {count} items but only {index} are allowed", ctx)
        else:
            sub, item_ctx = items, ctx.child(".items")
        value = generate(sub, item_ctx)
        if unique:
            needed = index < (min_items or 0)
            for _ in range(_UNIQUE_ATTEMPTS_NEEDED if needed else _UNIQUE_ATTEMPTS):
                if canonical(value) not in seen:
                    break
                value = generate(sub, item_ctx)
            else:
                if prefix is not None and index < len(prefix):
                    raise fail(f"cannot make tuple item {index} unique", ctx)
                break  # shorten the array rather than repeat a value
            seen.add(canonical(value))
        values.append(value)
    if len(values) < (min_items or 0):
        raise fail(f"cannot generate {min_items} unique items", ctx)
    return values


def _item_count(
    rng: random.Random,
    settings: SynthesisSettings,
    ctx: Ctx,
    prefix: list[Any] | None,
    min_items: int | None,
    max_items: int | None,
) -> int:
    """How many items: the fewest when minimal, a tuple's own length, else a uniform draw."""
    if ctx.minimal:
        return min_items or 0
    if prefix is not None:
        count = len(prefix) if max_items is None else min(len(prefix), max_items)
        return max(count, min_items or 0)
    lo, hi = narrow(min_items, max_items, settings.min_items, settings.max_items)
    return rng.randint(max(lo, 0), max(hi, 0))
