"""Schema normalization (older drafts' forms) and the merge of `allOf` branches."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from .context import Ctx, fail
from .keywords import ALLOWED_KEY, PATTERNS_KEY, canonical
from .limits import paced, shown

_Combiner = Callable[[Any, Any, Ctx], Any]


def normalize(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Rewrite older forms into the 2020-12 ones the generator reads."""
    out: dict[str, Any] | None = None

    def edit() -> dict[str, Any]:
        nonlocal out
        if out is None:
            out = dict(schema)
        return out

    for inclusive, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        flag = schema.get(exclusive)
        if isinstance(flag, bool):  # draft 4: the boolean makes `minimum` exclusive
            target = edit()
            del target[exclusive]
            if flag and inclusive in schema:
                target[exclusive] = target.pop(inclusive)
    items = schema.get("items")
    if isinstance(items, list):  # draft 4..2019 tuple form
        target = edit()
        target["prefixItems"] = items
        target["items"] = schema.get("additionalItems", True)
        target.pop("additionalItems", None)
    if (
        schema.get("additionalProperties") is False
        and ALLOWED_KEY not in schema
        and "patternProperties" not in schema
    ):
        properties = schema.get("properties")
        names = properties.keys() if isinstance(properties, Mapping) else ()
        edit()[ALLOWED_KEY] = frozenset(names)
    return schema if out is None else out


def merge(base: Mapping[str, Any], other: Mapping[str, Any], ctx: Ctx) -> Mapping[str, Any]:
    """One schema that demands what both demand (for allOf and oneOf/anyOf siblings)."""
    if not other:
        return base
    out = dict(base)
    for key, value in other.items():
        if key not in out:
            out[key] = value
            continue
        mine = out[key]
        if key == "pattern":
            if mine != value:
                out[PATTERNS_KEY] = [*out.get(PATTERNS_KEY, ()), value]
        elif key in ("anyOf", "oneOf", "$ref", "not"):
            # Keep ours; the other one becomes an allOf branch flattened later.
            out["allOf"] = [*out.get("allOf", []), {key: value}]
        elif key == "prefixItems" and isinstance(mine, list) and isinstance(value, list):
            out[key] = _merge_prefix(base, other, mine, value)
        elif key in _COMBINE:
            out[key] = _COMBINE[key](mine, value, ctx)
        # Anything else (annotations, unsupported keywords): the first one wins.
    return out


def _merge_prefix(
    base: Mapping[str, Any], other: Mapping[str, Any], mine: list[Any], theirs: list[Any]
) -> list[Any]:
    # Beyond its own prefix, each side constrains positions with its `items`.
    mine_rest, theirs_rest = base.get("items", True), other.get("items", True)
    merged = []
    for index in range(max(len(mine), len(theirs))):
        left = mine[index] if index < len(mine) else mine_rest
        right = theirs[index] if index < len(theirs) else theirs_rest
        merged.append({"allOf": [left, right]})
    return merged


# Each combiner gets both values of one keyword and returns the merged value; a combiner
# that only checks (const, format) or does not know the shapes returns the first value.


def _type_names(raw: Any, ctx: Ctx) -> list[str]:
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise fail(f"type must be a name or an array of names, got {shown(raw)}", ctx)
    return names


def _intersect_types(mine: Any, value: Any, ctx: Ctx) -> list[str]:
    left, right = _type_names(mine, ctx), _type_names(value, ctx)
    common: list[str] = []
    for name in left:
        if name in right or (name == "integer" and "number" in right):
            common.append(name)
        elif name == "number" and "integer" in right:
            common.append("integer")
    if not common:
        raise fail(f"allOf types {left} and {right} have nothing in common", ctx)
    return list(dict.fromkeys(common))


def _merge_properties(mine: Any, value: Any, ctx: Ctx) -> Any:
    if not (isinstance(mine, Mapping) and isinstance(value, Mapping)):
        return mine
    properties = dict(mine)
    for name, sub in paced(value.items(), ctx.path):
        properties[name] = {"allOf": [properties[name], sub]} if name in mine else sub
    return properties


def _merge_required(mine: Any, value: Any, ctx: Ctx) -> Any:
    if isinstance(mine, list) and isinstance(value, list):
        return list(dict.fromkeys([*mine, *value]))
    return mine


def _merge_enum(mine: Any, value: Any, ctx: Ctx) -> Any:
    if not (isinstance(mine, list) and isinstance(value, list)):
        return mine
    keys = {canonical(v) for v in paced(value, ctx.path)}
    common = [v for v in paced(mine, ctx.path) if canonical(v) in keys]
    if not common:
        raise fail("allOf enums have no value in common", ctx)
    return common


def _check_const(mine: Any, value: Any, ctx: Ctx) -> Any:
    if canonical(mine) != canonical(value):
        raise fail("allOf consts differ", ctx)
    return mine


def _check_format(mine: Any, value: Any, ctx: Ctx) -> Any:
    if mine != value:
        raise fail(f"allOf formats differ ({mine} and {value})", ctx)
    return mine


def _merge_subschemas(mine: Any, value: Any, ctx: Ctx) -> Any:
    if mine is False or value is False:
        return False
    return {"allOf": [mine, value]}


def _merge_multiple(mine: Any, value: Any, ctx: Ctx) -> Any:
    _numbers("multipleOf", mine, value, ctx)
    if mine <= 0 or value <= 0:
        raise fail(f"multipleOf must be positive, got {shown(mine)} and {shown(value)}", ctx)
    if isinstance(mine, int) and isinstance(value, int):
        return math.lcm(mine, value)
    if mine == value:
        return mine
    big, small = max(mine, value), min(mine, value)
    try:
        quotient = float(big / small)
    except OverflowError:
        quotient = math.inf
    if quotient.is_integer():
        return big
    raise fail(f"allOf multipleOf {mine} and {value} are not supported together", ctx)


def _merge_dependent(mine: Any, value: Any, ctx: Ctx) -> Any:
    if not isinstance(mine, Mapping) or not isinstance(value, Mapping):
        raise fail("dependentRequired must be an object of arrays", ctx)
    merged: dict[str, list[Any]] = {}
    for name, needs in [*mine.items(), *value.items()]:
        if not isinstance(needs, list):
            raise fail(f"dependentRequired of {name!r} must be an array of strings", ctx)
        merged[name] = list(dict.fromkeys([*merged.get(name, []), *needs]))
    return merged


def _numbers(key: str, mine: Any, value: Any, ctx: Ctx) -> None:
    for item in (mine, value):
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise fail(f"{key} must be a number, got {shown(item)}", ctx)


def _larger(key: str) -> _Combiner:
    def combine(mine: Any, value: Any, ctx: Ctx) -> Any:
        _numbers(key, mine, value, ctx)
        return max(mine, value)

    return combine


def _smaller(key: str) -> _Combiner:
    def combine(mine: Any, value: Any, ctx: Ctx) -> Any:
        _numbers(key, mine, value, ctx)
        return min(mine, value)

    return combine


def _lists(key: str) -> _Combiner:
    def combine(mine: Any, value: Any, ctx: Ctx) -> Any:
        if not isinstance(mine, list) or not isinstance(value, list):
            raise fail(f"{key} must be an array", ctx)
        return [*mine, *value]

    return combine


_COMBINE: Final[dict[str, _Combiner]] = {
    "type": _intersect_types,
    "properties": _merge_properties,
    "required": _merge_required,
    **{
        key: _larger(key)
        for key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
    },
    **{
        key: _smaller(key)
        for key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
    },
    "enum": _merge_enum,
    "const": _check_const,
    PATTERNS_KEY: lambda mine, value, ctx: [*mine, *value],
    "format": _check_format,
    **dict.fromkeys(("items", "additionalProperties", "contains"), _merge_subschemas),
    ALLOWED_KEY: lambda mine, value, ctx: mine & value,
    "uniqueItems": lambda mine, value, ctx: bool(mine) or bool(value),
    "multipleOf": _merge_multiple,
    "dependentRequired": _merge_dependent,
    "allOf": _lists("allOf"),
}
