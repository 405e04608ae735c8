"""String values: a word fitted to the lengths, a `format`, or a string for `pattern`."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Final

from .context import Ctx, fail
from .formats import FORMATS
from .keywords import PATTERNS_KEY, length, searches
from .limits import MAX_PATTERN_LENGTH, MAX_STRING_LENGTH, check_deadline, shown
from .pattern import (
    REPEAT_SPREAD,
    Node,
    PatternInvalid,
    PatternTooLong,
    PatternUnsupported,
    emit,
    min_length,
    parse_pattern,
)
from .words import WORDS

_PATTERN_ATTEMPTS: Final = 64


def string_value(rng: random.Random, schema: Mapping[str, Any], ctx: Ctx) -> str:
    min_len = length(schema, "minLength", ctx) or 0
    max_len = length(schema, "maxLength", ctx)
    if max_len is not None and min_len > max_len:
        raise fail(
            f"minLength ({shown(min_len)}) is greater than maxLength ({shown(max_len)})", ctx
        )
    if min_len > MAX_STRING_LENGTH:
        raise fail(
            f"minLength ({shown(min_len)}) exceeds the limit of {MAX_STRING_LENGTH} characters",
            ctx,
        )
    patterns = [p for p in (schema.get("pattern"), *schema.get(PATTERNS_KEY, ())) if p]
    fmt = schema.get("format")
    maker = FORMATS.get(fmt) if isinstance(fmt, str) else None
    if maker is not None:
        text = maker(rng)
        fits = min_len <= len(text) and (max_len is None or len(text) <= max_len)
        # With a pattern too, a formatted string that also matches it satisfies both;
        # otherwise the pattern wins (we cannot generate for pattern and format at once).
        if fits and all(searches(p, text) for p in patterns):
            return text
        if not patterns:
            raise fail(f"a {fmt} string cannot have length {min_len}..{max_len}", ctx)
    if patterns:
        return _pattern_string(rng, patterns, min_len, max_len, ctx)
    return _fit_length(rng.choice(WORDS), min_len, max_len)


def _pattern_string(
    rng: random.Random, patterns: list[Any], min_len: int, max_len: int | None, ctx: Ctx
) -> str:
    """A string that matches every pattern; only the first one is generated for."""
    # Every pattern is parsed, to report broken ones; only the first must be supported (an
    # unsupported other one is not checked, it counts as matching).
    tree, *_ = [_parsed(pattern, ctx) for pattern in patterns]
    if isinstance(tree, PatternUnsupported):
        raise fail(f"cannot generate for pattern {shown(patterns[0])}: {tree}", ctx)
    shortest = min_length(tree)
    if shortest > MAX_STRING_LENGTH:
        message = f"pattern {shown(patterns[0])} needs strings of at least {shown(shortest)}"
        raise fail(f"{message} characters, over the limit of {MAX_STRING_LENGTH}", ctx)
    # `boost` shifts the repeat counts of unbounded quantifiers; a bisection between
    # "too short" and "too long" boosts homes in on the length constraints.
    boost, low, high = 0, -REPEAT_SPREAD, max(REPEAT_SPREAD, min_len)
    for _ in range(_PATTERN_ATTEMPTS):
        check_deadline(ctx.path)
        parts: list[str] = []
        try:
            emit(tree, rng, parts, boost, MAX_STRING_LENGTH)
            text = "".join(parts)
        except PatternTooLong:
            text = None
        if text is not None and len(text) < min_len:
            # An unanchored pattern ("x") matches inside a longer string: pad it.
            padded = _fit_length(text + rng.choice(WORDS), min_len, max_len)
            if len(padded) >= min_len and all(searches(p, padded) for p in patterns):
                return padded
            low = boost + 1
            high = max(high, 2 * low)
        elif text is None or (max_len is not None and len(text) > max_len):
            high = max(boost - 1, -REPEAT_SPREAD)
            low = min(low, high)
        elif all(searches(p, text) for p in patterns):
            return text
        boost = (low + high) // 2
    raise fail(f"cannot generate a string matching pattern {shown(patterns[0])}", ctx)


def _parsed(pattern: Any, ctx: Ctx) -> Node | PatternUnsupported:
    """The tree of `pattern`, or why the generator cannot use it (unknown constructs). A
    syntax error, or a pattern over the length limit, is a `SynthesisError`."""
    if not isinstance(pattern, str):
        raise fail(f"invalid pattern {shown(pattern)}: not a string", ctx)
    if len(pattern) > MAX_PATTERN_LENGTH:
        message = f"pattern {shown(pattern)} is longer than the limit of"
        raise fail(f"{message} {MAX_PATTERN_LENGTH} characters", ctx)
    try:
        return parse_pattern(pattern)
    except PatternInvalid as exc:
        raise fail(f"invalid pattern {shown(pattern)}: {exc}", ctx) from None
    except PatternUnsupported as exc:
        return exc


def _fit_length(word: str, min_len: int, max_len: int | None) -> str:
    text = word
    while len(text) < min_len:
        text += " " + word
    if max_len is not None and len(text) > max_len:
        text = text[:max_len]
    stripped = text.rstrip()  # a trimmed "hello hello" should not end with a space
    return stripped if len(stripped) >= min_len else text
