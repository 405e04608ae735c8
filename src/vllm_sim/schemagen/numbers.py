"""Integer and number values: a uniform draw in the server range narrowed by the bounds."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from .context import Ctx, fail
from .keywords import bound, max_opt, min_opt, narrow, number_ok, positive_step
from .settings import SynthesisSettings

_NUMBER_ATTEMPTS: Final = 20


def integer_value(
    rng: random.Random, schema: Mapping[str, Any], settings: SynthesisSettings, ctx: Ctx
) -> int:
    low_bound, high_bound = _integer_bounds(schema, ctx)
    lo, hi = narrow(low_bound, high_bound, settings.min_integer, settings.max_integer)
    raw_step = schema.get("multipleOf")
    if raw_step is None:
        return rng.randint(lo, hi)
    step = positive_step(raw_step, ctx)
    if float(step).is_integer():
        return _int_multiple(rng, int(step), lo, hi, low_bound, high_bound, ctx)
    # A fractional step (0.5): draw integers and keep one the validators accept.
    for _ in range(_NUMBER_ATTEMPTS):
        value = rng.randint(lo, hi)
        if float(value / step).is_integer():
            return value
    raise fail(f"no integer in [{lo}, {hi}] is a multiple of {step!r}", ctx)


def _integer_bounds(schema: Mapping[str, Any], ctx: Ctx) -> tuple[int | None, int | None]:
    """The least and greatest integers the four bound keywords allow (None: unbounded)."""
    lower = bound(schema, "minimum", ctx)
    upper = bound(schema, "maximum", ctx)
    low_bound = None if lower is None else math.ceil(lower)
    high_bound = None if upper is None else math.floor(upper)
    exclusive_low = bound(schema, "exclusiveMinimum", ctx)
    if exclusive_low is not None:
        candidate = math.floor(exclusive_low) + 1
        low_bound = candidate if low_bound is None else max(low_bound, candidate)
    exclusive_high = bound(schema, "exclusiveMaximum", ctx)
    if exclusive_high is not None:
        candidate = math.ceil(exclusive_high) - 1
        high_bound = candidate if high_bound is None else min(high_bound, candidate)
    if low_bound is not None and high_bound is not None and low_bound > high_bound:
        raise fail(f"no integer between {low_bound} and {high_bound}", ctx)
    return low_bound, high_bound


def _int_multiple(
    rng: random.Random, step: int, lo: int, hi: int, low: int | None, high: int | None, ctx: Ctx
) -> int:
    first, last = -(-lo // step), hi // step
    if first > last:  # none in the server range: the multiple nearest to the schema bounds
        first = last = -(-low // step) if low is not None else (high or 0) // step
        value = first * step
        if (low is not None and value < low) or (high is not None and value > high):
            raise fail(f"no multiple of {step} within the bounds", ctx)
    return rng.randint(first, last) * step


def number_value(
    rng: random.Random, schema: Mapping[str, Any], settings: SynthesisSettings, ctx: Ctx
) -> float:
    lower = max_opt(bound(schema, "minimum", ctx), bound(schema, "exclusiveMinimum", ctx))
    upper = min_opt(bound(schema, "maximum", ctx), bound(schema, "exclusiveMaximum", ctx))
    if lower is not None and upper is not None and lower > upper:
        raise fail(f"no number between {lower} and {upper}", ctx)
    lo, hi = narrow(lower, upper, settings.min_number, settings.max_number)
    if "multipleOf" in schema:
        return _multiple(rng, schema, lo, hi, ctx)
    for _ in range(_NUMBER_ATTEMPTS):
        value = lo + (hi - lo) * rng.random()
        if number_ok(value, schema):
            return value
    middle = (lo + hi) / 2  # e.g. an exclusive bound right at the drawn edge
    if number_ok(middle, schema):
        return middle
    raise fail(f"no number satisfies the bounds [{lo}, {hi}]", ctx)


def _multiple(
    rng: random.Random, schema: Mapping[str, Any], lo: float, hi: float, ctx: Ctx
) -> float:
    step = positive_step(schema["multipleOf"], ctx)
    # Round to the step's decimals so 0.07 is emitted, not 0.07000000000000001.
    exponent = Decimal(repr(step)).as_tuple().exponent
    decimals = max(0, -exponent) if isinstance(exponent, int) else 0
    low_quotient, high_quotient = lo / step, hi / step
    if not (math.isfinite(low_quotient) and math.isfinite(high_quotient)):
        raise fail(f"multipleOf {step!r} is too small for the bounds [{lo}, {hi}]", ctx)
    first, last = math.ceil(low_quotient), math.floor(high_quotient)
    for _ in range(_NUMBER_ATTEMPTS):
        n = rng.randint(first, last) if first <= last else first
        value = round(n * step, decimals) if decimals else n * step
        # Float multiples are checked the way validators do (quotient is an integer).
        if number_ok(value, schema) and float(value / step).is_integer():
            return value
    raise fail(f"no multiple of {step!r} within the bounds", ctx)
