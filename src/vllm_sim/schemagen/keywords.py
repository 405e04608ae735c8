"""Reading keywords (bounds, lengths, types) and checking a value against the ones that
need no recursion: type, const, enum, numeric bounds, multipleOf, lengths, patterns."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from .context import Ctx, fail
from .limits import paced, shown
from .pattern import pattern_search

_T = TypeVar("_T", int, float)

TYPES: Final = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
# Rough cost of each type when the shortest output is wanted (deep recursion).
TYPE_COST: Final = {
    "null": 0,
    "boolean": 1,
    "integer": 1,
    "number": 1,
    "string": 1,
    "array": 2,
    "object": 3,
}
# Internal keys of merged schemas; the NUL prefix cannot clash with a user's keyword.
PATTERNS_KEY: Final = "\x00patterns"  # patterns beyond `pattern`, from merged allOf branches
ALLOWED_KEY: Final = "\x00allowed"  # names permitted by `additionalProperties: false`
_BOUNDS: Final = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


# ---- reading ---------------------------------------------------------------------------


def schema_list(schema: Mapping[str, Any], key: str, ctx: Ctx) -> list[Any]:
    branches = schema[key]
    if not isinstance(branches, list) or not branches:
        raise fail(f"{key} must be a non-empty array of schemas", ctx)
    return branches


def type_list(raw: Any) -> list[Any]:
    """The `type` keyword as a list: a name alone, an array as is, anything else empty."""
    return [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []


def bound(schema: Mapping[str, Any], key: str, ctx: Ctx) -> float | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        raise fail(f"{key} must be a finite number within the float range, got {shown(value)}", ctx)
    return value


def _finite(value: float) -> bool:
    """Finite, and (an integer) convertible to a float: larger ones overflow the math."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def length(schema: Mapping[str, Any], key: str, ctx: Ctx) -> int | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(f"{key} must be a non-negative integer, got {shown(value)}", ctx)
    return value


def positive_step(value: Any, ctx: Ctx) -> float:
    """A `multipleOf` value, which must be a positive number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise fail(f"multipleOf must be a positive number, got {shown(value)}", ctx)
    if not _finite(value):
        raise fail(f"multipleOf {shown(value)} is out of the float range", ctx)
    return value


def max_opt(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else max(a, b)


def min_opt(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else min(a, b)


def narrow(lower: _T | None, upper: _T | None, low: _T, high: _T) -> tuple[_T, _T]:
    """The server range [low, high] narrowed by the schema's bounds. If they do not overlap,
    the schema wins: both bounds are used as given, one bound gets a server-wide window."""
    if lower is None and upper is None:
        return low, high
    width = high - low
    if lower is not None and upper is not None:
        lo, hi = max(lower, low), min(upper, high)
        if lo < hi or (lo == hi and lower == upper):
            return lo, hi
        return lower, upper
    if lower is not None:
        return (max(lower, low), high) if lower < high else (lower, lower + width)
    assert upper is not None
    return (low, min(upper, high)) if upper > low else (upper - width, upper)


# ---- checking --------------------------------------------------------------------------


def number_ok(value: float, schema: Mapping[str, Any]) -> bool:
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    low, high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    return (
        (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
        and (low is None or value > low)
        and (high is None or value < high)
    )


def is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list | tuple)
    if name == "object":
        return isinstance(value, Mapping)
    return True  # unknown names: err towards "matches"


def of_types(value: Any, names: list[Any]) -> bool:
    """Whether `value` is of one of the types `names`."""
    for name in names:  # noqa: SIM110 -- once per enum value; any() + genexpr costs 3x more
        if is_type(value, name):
            return True
    return False


def canonical(value: Any) -> Any:
    """A hashable key with JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, Mapping):
        return ("object", tuple(sorted((k, canonical(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("array", tuple(canonical(v) for v in value))
    return ("value", value)


def within(size: int, least: Any, most: Any) -> bool:
    return (not isinstance(least, int) or size >= least) and (
        not isinstance(most, int) or size <= most
    )


def all_list(branches: Any, check: Callable[[Any], bool]) -> bool:
    return not isinstance(branches, list) or all(check(b) for b in branches)


def searches(pattern: Any, text: str) -> bool:
    """Whether `pattern` finds a match in `text` (`re.search`, as validators apply it), by
    the linear-time automaton of `pattern_search`: a user regex never runs on Python's
    backtracking `re`. A broken pattern counts as a match, as does one not checked."""
    return not isinstance(pattern, str) or pattern_search(pattern, text)


# Every keyword `matches_scalar_keywords` reads; the others never reject a scalar.
_SCALAR_KEYWORDS: Final = frozenset(
    {"type", "const", "enum", "multipleOf", *_BOUNDS, "minLength", "maxLength", "pattern"}
    | {PATTERNS_KEY}
)


def matches_scalar_keywords(value: Any, schema: Mapping[str, Any]) -> bool:
    raw = schema.get("type")
    if raw is not None:
        types = type_list(raw)
        if types and not of_types(value, types):
            return False
    if "const" in schema and canonical(value) != canonical(schema["const"]):
        return False
    enum = schema.get("enum")
    if isinstance(enum, list):
        key = canonical(value)
        if not any(canonical(v) == key for v in paced(enum)):
            return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _matches_number(value, schema)
    if isinstance(value, str):
        if not within(len(value), schema.get("minLength"), schema.get("maxLength")):
            return False
        patterns = [schema.get("pattern"), *schema.get(PATTERNS_KEY, ())]
        return all(searches(p, value) for p in patterns if isinstance(p, str))
    return True


def _matches_number(value: float, schema: Mapping[str, Any]) -> bool:
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and not isinstance(step, bool) and step > 0:
        # The way validators check it: exact for integers, quotient for floats.
        multiple = value % step == 0 if isinstance(step, int) else (value / step).is_integer()
        if not multiple:
            return False
    return number_ok(value, {k: v for k, v in schema.items() if _is_bound(k, v)})


def _is_bound(key: str, value: Any) -> bool:
    return key in _BOUNDS and (isinstance(value, int | float) and not isinstance(value, bool))


def enum_values(enum: list[Any], schema: Mapping[str, Any], ctx: Ctx) -> list[Any]:
    # Values the rest of the schema would reject (wrong type, out of bounds, too long) are
    # skipped; valid tool schemas hold none, so the uniform draw over `enum` is unchanged.
    # The values come from `enum` itself: check the rest (a set per value was quadratic),
    # and only the keywords that can reject one, which makes a 4,000-value enum cheap.
    rest = {key: value for key, value in schema.items() if key in _SCALAR_KEYWORDS}
    rest.pop("enum", None)
    if not rest:
        return enum
    if rest.keys() == {"type"}:  # the common case, in a tenth of the time
        types = type_list(rest["type"])
        values = [v for v in paced(enum, ctx.path) if of_types(v, types)]
    else:
        values = [v for v in paced(enum, ctx.path) if matches_scalar_keywords(v, rest)]
    if not values:
        raise fail(f"no enum value satisfies the schema (type {schema.get('type')})", ctx)
    return values
