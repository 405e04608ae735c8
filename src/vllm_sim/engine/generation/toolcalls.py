"""Tool-call arguments and structured output synthesized from a JSON schema (§8.1–8.2).

The whitelisted tool-parameter subset (chat-and-completions §2.4) follows §8.2 exactly:
enum pick, the ten-word string list, integers and numbers in the server ranges, coin-flip
booleans, arrays of `minItems..maxItems` elements, objects with every required property and
each optional one with a probability.

The same synthesizer also answers `response_format: json_schema`, so it goes further than
the reference and aims for output that VALIDATES against the schema (JSON Schema 2020-12):

- numeric bounds (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, also the
  draft-4 boolean form) narrow the server range; `multipleOf`;
- `minLength` / `maxLength` pad or trim the picked word; `const`;
- type arrays (`["string", "null"]`), `anyOf`, `oneOf` (a value that also matches another
  branch is regenerated a few times, then emitted anyway), `allOf` (branches are merged);
- `$ref` to any JSON pointer inside the root schema (`#`, `#/$defs/x`, `#/definitions/x`);
  after more than four nested references the shortest option is chosen (empty arrays,
  only required properties, the cheapest `anyOf` branch, `null` when allowed);
- `prefixItems` and array-form `items` (tuples), `uniqueItems`, `additionalProperties:
  false` inside `allOf`, `minProperties` / `maxProperties`, `dependentRequired`;
- `format` `date-time`, `date`, `time`, `email`, `idn-email`, `uri`, `uri-reference`, `iri`,
  `iri-reference`, `uuid`, `ipv4`, `ipv6`, `hostname`, `duration`;
- `pattern`: literals, `.`, classes (`[A-Z]`, `[^...]`, `\\d`, `\\w`, `\\s`, ...), groups,
  alternation, quantifiers and anchors. Every generated string is checked with `re.search`;
  a pattern that cannot be satisfied (backreferences, lookarounds, conflicting lengths)
  raises `SynthesisError` instead of producing a string that does not match. A formatted
  string is used when it also matches the pattern; otherwise the pattern wins over `format`;
- `enum` values that the rest of the schema rejects (type, bounds, lengths, pattern) are
  skipped; an integer `multipleOf` 0.5 draws integers; a float multiple is accepted only
  when `value / multipleOf` is integral, the check validators such as `jsonschema` make.

Not supported, and silently ignored: `not`, `if`/`then`/`else`, `contains`,
`patternProperties`, `propertyNames`, `dependentSchemas`, `unevaluated*`, `$dynamicRef`,
unknown formats (they are annotations). Raised as `SynthesisError`: a `$ref` outside the root
schema or to an anchor, an empty schema `{}` with no type (as in the reference),
contradictions (`minimum` above `maximum`, disjoint allOf types, ...). Best effort only: a
`oneOf` whose branches overlap everywhere (`[{"type": "boolean"}, {"type": "boolean"}]`)
and a `pattern` whose strings can never have the `format`.
"""

from __future__ import annotations

import copy
import datetime
import functools
import ipaddress
import json
import math
import random
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import unquote

if TYPE_CHECKING:
    from vllm_sim.config import Config

WORDS: Final[tuple[str, ...]] = (
    "testing",
    "hello",
    "Boston",
    "sunny",
    "temperature",
    "cloudy",
    "question",
    "Yorick",
    "silence",
    "lifetime",
)

_T = TypeVar("_T", int, float)

_TYPES: Final = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
# Rough cost of each type when the shortest output is wanted (deep recursion).
_TYPE_COST: Final = {
    "null": 0,
    "boolean": 1,
    "integer": 1,
    "number": 1,
    "string": 1,
    "array": 2,
    "object": 3,
}
# Keywords that never constrain a value: a `$ref` with only these beside it is the target.
_ANNOTATIONS: Final = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
# Internal keys of merged schemas; the NUL prefix cannot clash with a user's keyword.
_PATTERNS_KEY: Final = "\x00patterns"  # patterns beyond `pattern`, from merged allOf branches
_ALLOWED_KEY: Final = "\x00allowed"  # names permitted by `additionalProperties: false`

_MINIMAL_DEPTH: Final = 4  # more nested $refs than this: generate the shortest value
_MAX_REF_DEPTH: Final = 64  # a recursion that still has not ended here never will
_MAX_FLATTEN_STEPS: Final = 256  # bounds `$ref` chains that never reach a real schema
_COST_BUDGET: Final = 4  # how deep the static cost estimate looks
_ONE_OF_ATTEMPTS: Final = 8
_UNIQUE_ATTEMPTS: Final = 10  # per optional element, before the array is shortened
_UNIQUE_ATTEMPTS_NEEDED: Final = 200  # per element that minItems requires
_NUMBER_ATTEMPTS: Final = 20
_PATTERN_ATTEMPTS: Final = 64
_REPEAT_SPREAD: Final = 4  # extra repetitions of `*`, `+`, `{n,}` beyond the minimum
_PRINTABLE: Final = ((0x20, 0x7E),)  # the universe for negated classes and `.`
_DATE_START: Final = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
_DATE_SPAN_SECONDS: Final = 31 * 365 * 24 * 3600  # 2000..2030
# Go's encoding/json escapes these so the output is safe inside HTML <script> elements.
_GO_ESCAPES: Final = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


class SynthesisError(ValueError):
    """A schema we cannot generate a value for; the message names the problem and the path."""


@dataclass(frozen=True, slots=True)
class SynthesisSettings:
    """Server-side ranges and probabilities; the probabilities are percentages 0..100."""

    min_integer: int = 0
    max_integer: int = 100
    min_number: float = 0.0
    max_number: float = 100.0
    min_items: int = 1
    max_items: int = 5
    optional_param_probability: int = 50  # top-level optional properties of tool parameters
    optional_field_probability: int = 50  # optional properties of nested objects
    extra_call_probability: int = 45

    @classmethod
    def from_config(cls, cfg: Config) -> SynthesisSettings:
        return cls(
            min_integer=cfg.min_tool_call_integer_param,
            max_integer=cfg.max_tool_call_integer_param,
            min_number=cfg.min_tool_call_number_param,
            max_number=cfg.max_tool_call_number_param,
            min_items=cfg.min_tool_call_array_param_length,
            max_items=cfg.max_tool_call_array_param_length,
            optional_param_probability=cfg.tool_call_not_required_param_probability,
            optional_field_probability=cfg.object_tool_call_not_required_field_probability,
            extra_call_probability=cfg.tool_call_extra_call_probability,
        )


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
    return _Synthesizer(rng, schema, settings).generate(
        schema, _Ctx(path="$", depth=0, top=top_level, null_ok=False)
    )


def arguments_json(value: Any) -> str:
    """Compact JSON with sorted keys at every level, non-ASCII kept, HTML characters escaped
    as Go's encoding/json does (`<` -> `\\u003c`, `>`, `&`, U+2028, U+2029)."""
    text = json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
    )
    # These characters can only occur inside JSON strings, so a plain translation is safe.
    return text.translate(_GO_ESCAPES)


def call_count(
    rng: random.Random, candidates: int, forced: bool, settings: SynthesisSettings
) -> int:
    """How many tool calls (§8.1): 1 when forced (`required` or a named tool) else 0, plus one
    per successful extra-call draw while fewer than `candidates`."""
    if candidates < 1:
        raise ValueError("no tools available to create tool calls")
    count = 1 if forced else 0
    while count < candidates and rng.random() < settings.extra_call_probability / 100:
        count += 1
    return count


def pick_tools(rng: random.Random, names: Sequence[str], count: int) -> list[str]:
    """`count` tool names, uniform with replacement; a single candidate consumes no draw."""
    if not names:
        raise ValueError("no tools available to create tool calls")
    if len(names) == 1:
        return [names[0]] * count
    return [rng.choice(names) for _ in range(count)]


@dataclass(frozen=True, slots=True)
class _Ctx:
    path: str  # where in the schema we are, for error messages
    depth: int  # nested $refs followed so far
    top: bool  # the root instance (tool parameters): its optional props use the param rate
    null_ok: bool  # a `{"type": "null"}` reached through anyOf/oneOf may produce None

    @property
    def minimal(self) -> bool:
        return self.depth > _MINIMAL_DEPTH

    def at(self, suffix: str) -> _Ctx:
        return replace(self, path=self.path + suffix)

    def child(self, suffix: str) -> _Ctx:
        return _Ctx(path=self.path + suffix, depth=self.depth, top=False, null_ok=False)


def _fail(message: str, ctx: _Ctx) -> SynthesisError:
    return SynthesisError(f"{message} at {ctx.path}")


def _unsupported_type(name: object, ctx: _Ctx) -> SynthesisError:
    shown = "(missing)" if name is None else name
    return _fail(f"tool parameters of type {shown} are not supported", ctx)


class _Synthesizer:
    def __init__(
        self, rng: random.Random, root: Mapping[str, Any], settings: SynthesisSettings
    ) -> None:
        self._rng = rng
        self._root = root
        self._settings = settings

    # ---- entry and combinators -------------------------------------------------------

    def generate(self, schema: Any, ctx: _Ctx) -> Any:
        if schema is True:
            return self._rng.choice(WORDS)  # any value validates; a word is the cheapest
        flat, ctx = self._flatten(schema, ctx, keep_one_of=True)
        if "oneOf" in flat:
            return self._one_of(flat, ctx)
        return self._generate_flat(flat, ctx)

    def _flatten(
        self, schema: Any, ctx: _Ctx, *, keep_one_of: bool
    ) -> tuple[Mapping[str, Any], _Ctx]:
        """Resolve `$ref`, merge `allOf` and pick `anyOf` (and `oneOf` unless kept) until
        the schema has none of them at its top level."""
        for _ in range(_MAX_FLATTEN_STEPS):
            if schema is True:
                return {}, ctx
            if schema is False:
                raise _fail("schema false admits no value", ctx)
            if not isinstance(schema, Mapping):
                raise _fail(f"schema must be an object, got {type(schema).__name__}", ctx)
            schema = _normalize(schema)
            if "$ref" in schema:
                schema, ctx = self._follow_ref(schema, ctx)
            elif "allOf" in schema:
                schema, ctx = self._all_of(schema, ctx)
            elif "anyOf" in schema:
                schema, ctx = self._pick_branch(schema, "anyOf", ctx)
            elif "oneOf" in schema and not keep_one_of:
                schema, ctx = self._pick_branch(schema, "oneOf", ctx)
            else:
                return schema, ctx
        raise _fail("schema references do not reach a schema", ctx)

    def _follow_ref(self, schema: Mapping[str, Any], ctx: _Ctx) -> tuple[Any, _Ctx]:
        target, target_path = self._resolve(schema["$ref"], ctx)
        if ctx.depth + 1 > _MAX_REF_DEPTH:
            raise _fail("recursive schema never terminates", ctx)
        rest = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
        # 2020-12: keywords beside $ref apply too, exactly like an allOf.
        merged = {"allOf": [target, rest]} if rest else target
        return merged, replace(ctx, path=target_path, depth=ctx.depth + 1)

    def _resolve(self, ref: Any, ctx: _Ctx) -> tuple[Any, str]:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _fail(f"unsupported $ref {ref!r} (only references inside the schema)", ctx)
        pointer = ref[1:]
        if pointer and not pointer.startswith("/"):
            raise _fail(f"unsupported $ref {ref!r} (anchors are not supported)", ctx)
        node: Any = self._root
        path = "$"
        for raw in pointer.split("/")[1:]:
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and token in node:
                node = node[token]
                path += f".{token}"
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
                path += f"[{token}]"
            else:
                raise _fail(f"unresolvable $ref {ref!r}", ctx)
        return node, path

    def _all_of(self, schema: Mapping[str, Any], ctx: _Ctx) -> tuple[Mapping[str, Any], _Ctx]:
        branches = _schema_list(schema, "allOf", ctx)
        merged: Mapping[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        depth = ctx.depth
        for index, branch in enumerate(branches):
            flat, branch_ctx = self._flatten(branch, ctx.at(f".allOf[{index}]"), keep_one_of=False)
            merged = _merge(merged, flat, ctx)
            depth = max(depth, branch_ctx.depth)
        return merged, replace(ctx, depth=depth)

    def _pick_branch(
        self, schema: Mapping[str, Any], key: str, ctx: _Ctx
    ) -> tuple[Mapping[str, Any], _Ctx]:
        branches = _schema_list(schema, key, ctx)
        index = self._branch_order(branches, ctx)[0]
        rest = {k: v for k, v in schema.items() if k != key}
        branch_ctx = replace(ctx.at(f".{key}[{index}]"), null_ok=True)
        flat, branch_ctx = self._flatten(branches[index], branch_ctx, keep_one_of=True)
        return _merge(rest, flat, ctx), branch_ctx

    def _branch_order(self, branches: Sequence[Any], ctx: _Ctx) -> list[int]:
        """Indices to try: cheapest first when minimal, else a uniform pick first."""
        if ctx.minimal:
            costs = [self._cost(branch, _COST_BUDGET) for branch in branches]
            return sorted(range(len(branches)), key=lambda i: costs[i])
        first = self._rng.randrange(len(branches))
        return [first, *(i for i in range(len(branches)) if i != first)]

    def _one_of(self, schema: Mapping[str, Any], ctx: _Ctx) -> Any:
        # A value that also matches another branch would fail oneOf: regenerate it, then
        # fall back to other branches; after that, emit the last value (best effort).
        branches = _schema_list(schema, "oneOf", ctx)
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        value: Any = None
        for attempt in range(_ONE_OF_ATTEMPTS):
            order = self._branch_order(branches, ctx)
            index = order[attempt % len(order)] if ctx.minimal else order[0]
            branch_ctx = replace(ctx.at(f".oneOf[{index}]"), null_ok=True)
            flat, branch_ctx = self._flatten(branches[index], branch_ctx, keep_one_of=True)
            value = self.generate(_merge(rest, flat, ctx), branch_ctx)
            others = (b for i, b in enumerate(branches) if i != index)
            if not any(self._matches(value, other, 0) for other in others):
                return value
        return value

    # ---- values -----------------------------------------------------------------------

    def _generate_flat(self, schema: Mapping[str, Any], ctx: _Ctx) -> Any:
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return copy.deepcopy(self._rng.choice(_enum_values(enum, schema, ctx)))
        kind = self._pick_type(schema, ctx)
        if kind == "null":
            return None
        if kind == "boolean":
            return self._rng.random() < 0.5
        if kind == "integer":
            return self._integer(schema, ctx)
        if kind == "number":
            return self._number(schema, ctx)
        if kind == "string":
            return self._string(schema, ctx)
        if kind == "array":
            return self._array(schema, ctx)
        return self._object(schema, ctx)

    def _pick_type(self, schema: Mapping[str, Any], ctx: _Ctx) -> str:
        raw = schema.get("type")
        if raw is None:
            if "properties" in schema:
                return "object"
            raise _unsupported_type(None, ctx)
        if isinstance(raw, str):
            names = [raw]
        elif isinstance(raw, list) and raw and all(isinstance(t, str) for t in raw):
            names = list(dict.fromkeys(raw))
        else:
            raise _unsupported_type(raw, ctx)
        known = [t for t in names if t in _TYPES]
        if not known:
            raise _unsupported_type(names[0], ctx)
        if len(known) == 1:
            # A null-only type is an error as in the reference, unless it is one of several
            # alternatives (type array or anyOf/oneOf branch).
            if known[0] == "null" and len(names) == 1 and not ctx.null_ok:
                raise _unsupported_type("null", ctx)
            return known[0]
        if ctx.minimal:
            return min(known, key=_TYPE_COST.__getitem__)
        return self._rng.choice(known)

    def _integer(self, schema: Mapping[str, Any], ctx: _Ctx) -> int:
        lower = _bound(schema, "minimum", ctx)
        upper = _bound(schema, "maximum", ctx)
        low_bound = None if lower is None else math.ceil(lower)
        high_bound = None if upper is None else math.floor(upper)
        exclusive_low = _bound(schema, "exclusiveMinimum", ctx)
        if exclusive_low is not None:
            candidate = math.floor(exclusive_low) + 1
            low_bound = candidate if low_bound is None else max(low_bound, candidate)
        exclusive_high = _bound(schema, "exclusiveMaximum", ctx)
        if exclusive_high is not None:
            candidate = math.ceil(exclusive_high) - 1
            high_bound = candidate if high_bound is None else min(high_bound, candidate)
        if low_bound is not None and high_bound is not None and low_bound > high_bound:
            raise _fail(f"no integer between {low_bound} and {high_bound}", ctx)
        settings = self._settings
        lo, hi = _narrow(low_bound, high_bound, settings.min_integer, settings.max_integer)
        step = schema.get("multipleOf")
        if step is None:
            return self._rng.randint(lo, hi)
        if isinstance(step, bool) or not isinstance(step, int | float) or step <= 0:
            raise _fail(f"multipleOf must be a positive number, got {step!r}", ctx)
        if float(step).is_integer():
            return self._int_multiple(int(step), lo, hi, low_bound, high_bound, ctx)
        # A fractional step (0.5): draw integers and keep one the validators accept.
        for _ in range(_NUMBER_ATTEMPTS):
            value = self._rng.randint(lo, hi)
            if float(value / step).is_integer():
                return value
        raise _fail(f"no integer in [{lo}, {hi}] is a multiple of {step!r}", ctx)

    def _int_multiple(
        self, step: int, lo: int, hi: int, low: int | None, high: int | None, ctx: _Ctx
    ) -> int:
        first, last = -(-lo // step), hi // step
        if first > last:  # none in the server range: the multiple nearest to the schema bounds
            first = last = -(-low // step) if low is not None else (high or 0) // step
            value = first * step
            if (low is not None and value < low) or (high is not None and value > high):
                raise _fail(f"no multiple of {step} within the bounds", ctx)
        return self._rng.randint(first, last) * step

    def _number(self, schema: Mapping[str, Any], ctx: _Ctx) -> float:
        lower = _max_opt(_bound(schema, "minimum", ctx), _bound(schema, "exclusiveMinimum", ctx))
        upper = _min_opt(_bound(schema, "maximum", ctx), _bound(schema, "exclusiveMaximum", ctx))
        if lower is not None and upper is not None and lower > upper:
            raise _fail(f"no number between {lower} and {upper}", ctx)
        settings = self._settings
        lo, hi = _narrow(lower, upper, settings.min_number, settings.max_number)
        if "multipleOf" in schema:
            return self._multiple(schema, lo, hi, ctx)
        for _ in range(_NUMBER_ATTEMPTS):
            value = lo + (hi - lo) * self._rng.random()
            if _number_ok(value, schema):
                return value
        middle = (lo + hi) / 2  # e.g. an exclusive bound right at the drawn edge
        if _number_ok(middle, schema):
            return middle
        raise _fail(f"no number satisfies the bounds [{lo}, {hi}]", ctx)

    def _multiple(self, schema: Mapping[str, Any], lo: float, hi: float, ctx: _Ctx) -> float:
        step = schema["multipleOf"]
        if isinstance(step, bool) or not isinstance(step, int | float) or step <= 0:
            raise _fail(f"multipleOf must be a positive number, got {step!r}", ctx)
        # Round to the step's decimals so 0.07 is emitted, not 0.07000000000000001.
        decimals = max(0, -int(Decimal(repr(step)).as_tuple().exponent))
        first, last = math.ceil(lo / step), math.floor(hi / step)
        for _ in range(_NUMBER_ATTEMPTS):
            n = self._rng.randint(first, last) if first <= last else first
            value = round(n * step, decimals) if decimals else n * step
            # Float multiples are checked the way validators do (quotient is an integer).
            if _number_ok(value, schema) and float(value / step).is_integer():
                return value
        raise _fail(f"no multiple of {step!r} within the bounds", ctx)

    def _string(self, schema: Mapping[str, Any], ctx: _Ctx) -> str:
        min_len = _length(schema, "minLength", ctx) or 0
        max_len = _length(schema, "maxLength", ctx)
        if max_len is not None and min_len > max_len:
            raise _fail(f"minLength ({min_len}) is greater than maxLength ({max_len})", ctx)
        patterns = [p for p in (schema.get("pattern"), *schema.get(_PATTERNS_KEY, ())) if p]
        fmt = schema.get("format")
        maker = _FORMATS.get(fmt) if isinstance(fmt, str) else None
        if maker is not None:
            text = maker(self._rng)
            fits = min_len <= len(text) and (max_len is None or len(text) <= max_len)
            # With a pattern too, a formatted string that also matches it satisfies both;
            # otherwise the pattern wins (we cannot generate for pattern and format at once).
            if fits and all(_searches(p, text) for p in patterns):
                return text
            if not patterns:
                raise _fail(f"a {fmt} string cannot have length {min_len}..{max_len}", ctx)
        if patterns:
            return self._pattern_string(patterns, min_len, max_len, ctx)
        return _fit_length(self._rng.choice(WORDS), min_len, max_len)

    def _pattern_string(
        self, patterns: list[Any], min_len: int, max_len: int | None, ctx: _Ctx
    ) -> str:
        try:
            compiled = [re.compile(p) for p in patterns]
        except (re.error, TypeError) as exc:
            raise _fail(f"invalid pattern {patterns[0]!r}: {exc}", ctx) from None
        try:
            tree = _parse_pattern(patterns[0])
        except _PatternUnsupported as exc:
            raise _fail(f"cannot generate for pattern {patterns[0]!r}: {exc}", ctx) from None
        # `boost` shifts the repeat counts of unbounded quantifiers; a bisection between
        # "too short" and "too long" boosts homes in on the length constraints.
        boost, low, high = 0, -_REPEAT_SPREAD, max(_REPEAT_SPREAD, min_len)
        for _ in range(_PATTERN_ATTEMPTS):
            parts: list[str] = []
            _emit(tree, self._rng, parts, boost)
            text = "".join(parts)
            if len(text) < min_len:
                # An unanchored pattern ("x") matches inside a longer string: pad it.
                padded = _fit_length(text + self._rng.choice(WORDS), min_len, max_len)
                if len(padded) >= min_len and all(c.search(padded) for c in compiled):
                    return padded
                low = boost + 1
                high = max(high, 2 * low)
            elif max_len is not None and len(text) > max_len:
                high = max(boost - 1, -_REPEAT_SPREAD)
                low = min(low, high)
            elif all(c.search(text) for c in compiled):
                return text
            boost = (low + high) // 2
        raise _fail(f"cannot generate a string matching pattern {patterns[0]!r}", ctx)

    def _array(self, schema: Mapping[str, Any], ctx: _Ctx) -> list[Any]:
        min_items = _length(schema, "minItems", ctx)
        max_items = _length(schema, "maxItems", ctx)
        if min_items is not None and max_items is not None and min_items > max_items:
            raise _fail(f"minItems ({min_items}) is greater than maxItems({max_items})", ctx)
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if prefix is not None and not isinstance(prefix, list):
            raise _fail("prefixItems must be an array of schemas", ctx)
        if ctx.minimal:
            length = min_items or 0
        elif prefix is not None:
            length = len(prefix) if max_items is None else min(len(prefix), max_items)
            length = max(length, min_items or 0)
        else:
            settings = self._settings
            lo, hi = _narrow(min_items, max_items, settings.min_items, settings.max_items)
            length = self._rng.randint(max(lo, 0), max(hi, 0))
        unique = schema.get("uniqueItems") is True
        values: list[Any] = []
        seen: set[Any] = set()
        for index in range(length):
            if prefix is not None and index < len(prefix):
                sub, item_ctx = prefix[index], ctx.child(f".prefixItems[{index}]")
            elif items is False:
                raise _fail(f"array needs {length} items but only {index} are allowed", ctx)
            else:
                sub, item_ctx = items, ctx.child(".items")
            value = self.generate(sub, item_ctx)
            if unique:
                needed = index < (min_items or 0)
                for _ in range(_UNIQUE_ATTEMPTS_NEEDED if needed else _UNIQUE_ATTEMPTS):
                    if _canonical(value) not in seen:
                        break
                    value = self.generate(sub, item_ctx)
                else:
                    if prefix is not None and index < len(prefix):
                        raise _fail(f"cannot make tuple item {index} unique", ctx)
                    break  # shorten the array rather than repeat a value
                seen.add(_canonical(value))
            values.append(value)
        if len(values) < (min_items or 0):
            raise _fail(f"cannot generate {min_items} unique items", ctx)
        return values

    def _object(self, schema: Mapping[str, Any], ctx: _Ctx) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        if not isinstance(properties, Mapping):
            raise _fail("properties must be an object", ctx)
        required = schema.get("required") or []
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise _fail("required must be an array of strings", ctx)
        allowed: frozenset[str] | None = schema.get(_ALLOWED_KEY)
        settings = self._settings
        percent = (
            settings.optional_param_probability if ctx.top else settings.optional_field_probability
        )
        chosen: list[str] = []
        optional: list[str] = []  # declared, allowed optional properties, in order
        for name, sub in properties.items():
            if name in required:
                chosen.append(name)
            elif sub is not False and (allowed is None or name in allowed):
                optional.append(name)
                if not ctx.minimal and self._rng.random() < percent / 100:
                    chosen.append(name)
        for name in required:
            if name not in chosen:
                chosen.append(name)
        chosen = self._adjust_property_count(schema, chosen, required, optional, ctx)
        result: dict[str, Any] = {}
        for name in chosen:
            if allowed is not None and name not in allowed:
                raise _fail(f"required property {name!r} is not allowed", ctx)
            if name in properties:
                result[name] = self.generate(properties[name], ctx.child(f".properties.{name}"))
            else:
                extra = schema.get("additionalProperties", True)
                if extra is False:
                    raise _fail(f"required property {name!r} is not allowed", ctx)
                result[name] = self.generate(extra, ctx.child(f".additionalProperties.{name}"))
        return result

    def _adjust_property_count(
        self,
        schema: Mapping[str, Any],
        chosen: list[str],
        required: list[str],
        optional: list[str],
        ctx: _Ctx,
    ) -> list[str]:
        raw = schema.get("dependentRequired")
        dependent: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

        def closure(names: list[str]) -> list[str]:
            result = list(names)
            for name in result:  # grows while iterating: dependencies may have dependencies
                result.extend(d for d in dependent.get(name, ()) if d not in result)
            return result

        chosen = closure(chosen)
        most = _length(schema, "maxProperties", ctx)
        while most is not None and len(chosen) > most:
            # Drop the last optional property that no other chosen property depends on.
            needed = {d for name in chosen for d in dependent.get(name, ())}
            droppable = [n for n in chosen if n not in required and n not in needed]
            if not droppable:
                raise _fail(f"more than maxProperties ({most}) properties are required", ctx)
            chosen.remove(droppable[-1])
        least = _length(schema, "minProperties", ctx) or 0
        for name in optional:
            if len(chosen) >= least:
                break
            if name not in chosen:
                grown = closure([*chosen, name])
                if most is None or len(grown) <= most:
                    chosen = grown
        if len(chosen) < least:
            raise _fail(f"cannot generate minProperties ({least}) declared properties", ctx)
        return chosen

    # ---- static helpers that need the root (refs) ----------------------------------------

    def _cost(self, schema: Any, budget: int) -> int:
        """A rough size of the smallest value of `schema`, to pick the shortest branch."""
        if schema is True:
            return 1
        if not isinstance(schema, Mapping):
            return 1000
        if budget <= 0:
            return 100
        if "$ref" in schema:
            try:
                target, _ = self._resolve(schema["$ref"], _Ctx("$", 0, False, False))
            except SynthesisError:
                return 1000
            return 5 + self._cost(target, budget - 1)
        if "const" in schema or schema.get("enum"):
            return 0
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                return min(self._cost(b, budget - 1) for b in branches)
        branches = schema.get("allOf")
        if isinstance(branches, list) and branches:
            return sum(self._cost(b, budget - 1) for b in branches)
        raw = schema.get("type", "object" if "properties" in schema else None)
        types = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        known = [t for t in types if t in _TYPE_COST]
        if not known:
            return 50
        kind = min(known, key=_TYPE_COST.__getitem__)
        cost = _TYPE_COST[kind]
        if kind == "array":
            count = schema.get("minItems") or 0
            if count:
                cost += count * self._cost(schema.get("items", True), budget - 1)
        elif kind == "object":
            properties = schema.get("properties") or {}
            for name in schema.get("required") or []:
                cost += self._cost(properties.get(name, True), budget - 1)
        return cost

    def _matches(self, value: Any, schema: Any, depth: int) -> bool:
        """Whether `value` validates against `schema`, for the oneOf check. Keywords it does
        not know count as satisfied, so it errs towards "matches" (regenerating more)."""
        if schema is True or depth > _MAX_REF_DEPTH:
            return True
        if schema is False:
            return False
        if not isinstance(schema, Mapping):
            return True
        schema = _normalize(schema)
        if "$ref" in schema:
            try:
                target, _ = self._resolve(schema["$ref"], _Ctx("$", 0, False, False))
            except SynthesisError:
                return True
            if not self._matches(value, target, depth + 1):
                return False
        if not _all_list(schema.get("allOf"), lambda s: self._matches(value, s, depth + 1)):
            return False
        any_of = schema.get("anyOf")
        if isinstance(any_of, list) and not any(self._matches(value, s, depth + 1) for s in any_of):
            return False
        one_of = schema.get("oneOf")
        if (
            isinstance(one_of, list)
            and sum(1 for s in one_of if self._matches(value, s, depth + 1)) != 1
        ):
            return False
        if "not" in schema and self._matches(value, schema["not"], depth + 1):
            return False
        if not _matches_scalar_keywords(value, schema):
            return False
        if isinstance(value, list):
            return self._matches_array(value, schema, depth)
        if isinstance(value, Mapping):
            return self._matches_object(value, schema, depth)
        return True

    def _matches_array(self, value: list[Any], schema: Mapping[str, Any], depth: int) -> bool:
        if not _within(len(value), schema.get("minItems"), schema.get("maxItems")):
            return False
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = schema.get("items", True)
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else items
            if not self._matches(item, sub, depth + 1):
                return False
        if schema.get("uniqueItems") is True:
            keys = [_canonical(item) for item in value]
            if len(set(keys)) != len(keys):
                return False
        return True

    def _matches_object(
        self, value: Mapping[str, Any], schema: Mapping[str, Any], depth: int
    ) -> bool:
        required = schema.get("required")
        if isinstance(required, list) and any(name not in value for name in required):
            return False
        if not _within(len(value), schema.get("minProperties"), schema.get("maxProperties")):
            return False
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        extra = schema.get("additionalProperties", True)
        allowed: frozenset[str] | None = schema.get(_ALLOWED_KEY)
        for name, item in value.items():
            if allowed is not None and name not in allowed:
                return False
            sub = properties.get(name, extra)
            if not self._matches(item, sub, depth + 1):
                return False
        return True


# ---- schema helpers ----------------------------------------------------------------------


def _normalize(schema: Mapping[str, Any]) -> Mapping[str, Any]:
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
        and _ALLOWED_KEY not in schema
        and "patternProperties" not in schema
    ):
        properties = schema.get("properties")
        names = properties.keys() if isinstance(properties, Mapping) else ()
        edit()[_ALLOWED_KEY] = frozenset(names)
    return schema if out is None else out


def _merge(base: Mapping[str, Any], other: Mapping[str, Any], ctx: _Ctx) -> Mapping[str, Any]:
    """One schema that demands what both demand (for allOf and oneOf/anyOf siblings)."""
    if not other:
        return base
    out = dict(base)
    for key, value in other.items():
        if key not in out:
            out[key] = value
            continue
        mine = out[key]
        if key == "type":
            out[key] = _intersect_types(mine, value, ctx)
        elif key == "properties" and isinstance(mine, Mapping) and isinstance(value, Mapping):
            properties = dict(mine)
            for name, sub in value.items():
                properties[name] = {"allOf": [properties[name], sub]} if name in mine else sub
            out[key] = properties
        elif key == "required" and isinstance(mine, list) and isinstance(value, list):
            out[key] = list(dict.fromkeys([*mine, *value]))
        elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"):
            out[key] = max(mine, value)
        elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"):
            out[key] = min(mine, value)
        elif key == "enum" and isinstance(mine, list) and isinstance(value, list):
            keys = {_canonical(v) for v in value}
            out[key] = [v for v in mine if _canonical(v) in keys]
            if not out[key]:
                raise _fail("allOf enums have no value in common", ctx)
        elif key == "const":
            if _canonical(mine) != _canonical(value):
                raise _fail("allOf consts differ", ctx)
        elif key == "pattern":
            if mine != value:
                out[_PATTERNS_KEY] = [*out.get(_PATTERNS_KEY, ()), value]
        elif key == _PATTERNS_KEY:
            out[key] = [*mine, *value]
        elif key == "format":
            if mine != value:
                raise _fail(f"allOf formats differ ({mine} and {value})", ctx)
        elif key in ("items", "additionalProperties", "contains"):
            if mine is False or value is False:
                out[key] = False
            else:
                out[key] = {"allOf": [mine, value]}
        elif key == "prefixItems" and isinstance(mine, list) and isinstance(value, list):
            out[key] = _merge_prefix(base, other, mine, value)
        elif key == _ALLOWED_KEY:
            out[key] = mine & value
        elif key == "uniqueItems":
            out[key] = bool(mine) or bool(value)
        elif key == "multipleOf":
            out[key] = _merge_multiple(mine, value, ctx)
        elif key == "dependentRequired" and isinstance(mine, Mapping):
            merged = {k: list(v) for k, v in mine.items()}
            for name, needs in value.items():
                merged[name] = list(dict.fromkeys([*merged.get(name, []), *needs]))
            out[key] = merged
        elif key in ("anyOf", "oneOf", "$ref", "not"):
            # Keep ours; the other one becomes an allOf branch flattened later.
            out["allOf"] = [*out.get("allOf", []), {key: value}]
        elif key == "allOf":
            out[key] = [*mine, *value]
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


def _merge_multiple(mine: Any, value: Any, ctx: _Ctx) -> Any:
    if isinstance(mine, int) and isinstance(value, int):
        return math.lcm(mine, value)
    if mine == value:
        return mine
    big, small = max(mine, value), min(mine, value)
    if float(big / small).is_integer():
        return big
    raise _fail(f"allOf multipleOf {mine} and {value} are not supported together", ctx)


def _intersect_types(mine: Any, value: Any, ctx: _Ctx) -> list[str]:
    left = [mine] if isinstance(mine, str) else list(mine)
    right = [value] if isinstance(value, str) else list(value)
    common: list[str] = []
    for name in left:
        if name in right or (name == "integer" and "number" in right):
            common.append(name)
        elif name == "number" and "integer" in right:
            common.append("integer")
    if not common:
        raise _fail(f"allOf types {left} and {right} have nothing in common", ctx)
    return list(dict.fromkeys(common))


def _schema_list(schema: Mapping[str, Any], key: str, ctx: _Ctx) -> list[Any]:
    branches = schema[key]
    if not isinstance(branches, list) or not branches:
        raise _fail(f"{key} must be a non-empty array of schemas", ctx)
    return branches


def _enum_values(enum: list[Any], schema: Mapping[str, Any], ctx: _Ctx) -> list[Any]:
    # Values the rest of the schema would reject (wrong type, out of bounds, too long) are
    # skipped; valid tool schemas hold none, so the reference's uniform draw is unchanged.
    values = [v for v in enum if _matches_scalar_keywords(v, schema)]
    if not values:
        raise _fail(f"no enum value satisfies the schema (type {schema.get('type')})", ctx)
    return values


def _bound(schema: Mapping[str, Any], key: str, ctx: _Ctx) -> float | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(f"{key} must be a finite number, got {value!r}", ctx)
    return value


def _length(schema: Mapping[str, Any], key: str, ctx: _Ctx) -> int | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(f"{key} must be a non-negative integer, got {value!r}", ctx)
    return value


def _max_opt(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else max(a, b)


def _min_opt(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else min(a, b)


def _narrow(lower: _T | None, upper: _T | None, low: _T, high: _T) -> tuple[_T, _T]:
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


def _number_ok(value: float, schema: Mapping[str, Any]) -> bool:
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    low, high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    return (
        (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
        and (low is None or value > low)
        and (high is None or value < high)
    )


def _fit_length(word: str, min_len: int, max_len: int | None) -> str:
    text = word
    while len(text) < min_len:
        text += " " + word
    if max_len is not None and len(text) > max_len:
        text = text[:max_len]
    stripped = text.rstrip()  # a trimmed "hello hello" should not end with a space
    return stripped if len(stripped) >= min_len else text


def _is_type(value: Any, name: str) -> bool:
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


def _canonical(value: Any) -> Any:
    """A hashable key with JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, Mapping):
        return ("object", tuple(sorted((k, _canonical(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("array", tuple(_canonical(v) for v in value))
    return ("value", value)


def _within(size: int, least: Any, most: Any) -> bool:
    return (not isinstance(least, int) or size >= least) and (
        not isinstance(most, int) or size <= most
    )


def _all_list(branches: Any, check: Callable[[Any], bool]) -> bool:
    return not isinstance(branches, list) or all(check(b) for b in branches)


def _matches_scalar_keywords(value: Any, schema: Mapping[str, Any]) -> bool:
    raw = schema.get("type")
    if raw is not None:
        types = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        if types and not any(_is_type(value, t) for t in types):
            return False
    if "const" in schema and _canonical(value) != _canonical(schema["const"]):
        return False
    enum = schema.get("enum")
    if isinstance(enum, list) and _canonical(value) not in {_canonical(v) for v in enum}:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and not isinstance(step, bool) and step > 0:
            # The way validators check it: exact for integers, quotient for floats.
            multiple = value % step == 0 if isinstance(step, int) else (value / step).is_integer()
            if not multiple:
                return False
        return _number_ok(value, {k: v for k, v in schema.items() if _is_bound(k, v)})
    if isinstance(value, str):
        if not _within(len(value), schema.get("minLength"), schema.get("maxLength")):
            return False
        patterns = [schema.get("pattern"), *schema.get(_PATTERNS_KEY, ())]
        return all(_searches(p, value) for p in patterns if isinstance(p, str))
    return True


def _searches(pattern: Any, text: str) -> bool:
    """`re.search`, as validators apply `pattern`; a broken pattern counts as a match."""
    try:
        return re.search(pattern, text) is not None
    except (re.error, TypeError):
        return True


def _is_bound(key: str, value: Any) -> bool:
    return key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


# ---- formats -----------------------------------------------------------------------------


def _random_moment(rng: random.Random) -> datetime.datetime:
    return _DATE_START + datetime.timedelta(seconds=rng.randrange(_DATE_SPAN_SECONDS))


def _word_slug(rng: random.Random) -> str:
    return rng.choice(WORDS).lower()


_FORMATS: Final[dict[str, Callable[[random.Random], str]]] = {
    "date-time": lambda rng: _random_moment(rng).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "date": lambda rng: _random_moment(rng).strftime("%Y-%m-%d"),
    "time": lambda rng: _random_moment(rng).strftime("%H:%M:%SZ"),
    "email": lambda rng: f"{_word_slug(rng)}@example.com",
    "idn-email": lambda rng: f"{_word_slug(rng)}@example.com",
    "uri": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "uri-reference": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "iri": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "iri-reference": lambda rng: f"https://example.com/{_word_slug(rng)}",
    "hostname": lambda rng: f"{_word_slug(rng)}.example.com",
    "uuid": lambda rng: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
    "ipv4": lambda rng: str(ipaddress.IPv4Address(rng.getrandbits(32))),
    "ipv6": lambda rng: str(ipaddress.IPv6Address(rng.getrandbits(128))),
    "duration": lambda rng: f"P{rng.randint(1, 30)}D",
}


# ---- patterns ------------------------------------------------------------------------------


class _PatternUnsupported(Exception):
    """A regex construct the generator cannot produce strings for."""


@dataclass(frozen=True, slots=True)
class _Chars:
    ranges: tuple[tuple[int, int], ...]  # inclusive code-point ranges, picked uniformly


@dataclass(frozen=True, slots=True)
class _Seq:
    items: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Alt:
    options: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Repeat:
    node: _Node
    least: int
    most: int | None  # None: unbounded


_Node = _Chars | _Seq | _Alt | _Repeat
_EMPTY: Final = _Seq(())  # anchors and word boundaries: zero-width, checked by re.search
_DIGITS: Final = ((0x30, 0x39),)
_WORD: Final = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Final = ((0x20, 0x20),)
_DOT: Final = ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A))  # readable characters for `.`
_QUANTIFIER: Final = re.compile(r"\{(\d*)(,?)(\d*)\}")
_CONTROL_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_ZERO_WIDTH_ESCAPES: Final = frozenset("bBAZz")


@functools.lru_cache(maxsize=256)
def _parse_pattern(pattern: str) -> _Node:
    return _PatternParser(pattern).parse()


class _PatternParser:
    def __init__(self, pattern: str) -> None:
        self._text = pattern
        self._pos = 0

    def parse(self) -> _Node:
        node = self._alternation()
        if self._pos != len(self._text):
            raise _PatternUnsupported(f"unexpected {self._text[self._pos]!r}")
        return node

    def _peek(self) -> str:
        return self._text[self._pos] if self._pos < len(self._text) else ""

    def _next(self) -> str:
        if self._pos >= len(self._text):
            raise _PatternUnsupported("unexpected end")
        char = self._text[self._pos]
        self._pos += 1
        return char

    def _alternation(self) -> _Node:
        options = [self._sequence()]
        while self._peek() == "|":
            self._pos += 1
            options.append(self._sequence())
        return options[0] if len(options) == 1 else _Alt(tuple(options))

    def _sequence(self) -> _Node:
        items: list[_Node] = []
        while self._peek() not in ("", "|", ")"):
            items.append(self._quantified(self._atom()))
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def _atom(self) -> _Node:
        char = self._next()
        if char == "(":
            self._group_prefix()
            node = self._alternation()
            if self._next() != ")":
                raise _PatternUnsupported("unbalanced group")
            return node
        if char == "[":
            return self._char_class()
        if char == ".":
            return _Chars(_DOT)
        if char in "^$":
            return _EMPTY
        if char == "\\":
            return self._escape(in_class=False)
        if char in "*+?":
            raise _PatternUnsupported("nothing to repeat")
        return _literal(char)

    def _group_prefix(self) -> None:
        if self._peek() != "?":
            return
        rest = self._text[self._pos :]
        if rest.startswith("?:"):
            self._pos += 2
            return
        named = re.match(r"\?P?<([A-Za-z_]\w*)>", rest)
        if named:
            self._pos += named.end()
            return
        raise _PatternUnsupported("lookarounds and inline flags are not supported")

    def _quantified(self, node: _Node) -> _Node:
        char = self._peek()
        if char == "*":
            least, most = 0, None
            self._pos += 1
        elif char == "+":
            least, most = 1, None
            self._pos += 1
        elif char == "?":
            least, most = 0, 1
            self._pos += 1
        elif char == "{":
            match = _QUANTIFIER.match(self._text, self._pos)
            if not match or not (match.group(1) or match.group(3)):
                return node  # Python reads a malformed `{...}` literally
            least = int(match.group(1) or 0)
            most = least  # `{n}`; `{n,}` is unbounded, `{n,m}` and `{,m}` bounded
            if match.group(2):
                most = int(match.group(3)) if match.group(3) else None
            if most is not None and most < least:
                raise _PatternUnsupported("quantifier range is reversed")
            self._pos = match.end()
        else:
            return node
        if self._peek() in ("?", "+"):  # lazy and possessive forms generate the same strings
            self._pos += 1
        return _Repeat(node, least, most)

    def _escape(self, *, in_class: bool) -> _Node:
        char = self._next()
        sets = {
            "d": _DIGITS,
            "w": _WORD,
            "s": _SPACE,
            "D": _complement(_DIGITS),
            "W": _complement(_WORD),
            "S": _complement(_SPACE),
        }
        if char in sets:
            return _Chars(sets[char])
        if char in _CONTROL_ESCAPES:
            return _literal(_CONTROL_ESCAPES[char])
        if char in _ZERO_WIDTH_ESCAPES and not in_class:
            return _EMPTY
        if char == "b":  # inside a class, \b is a backspace
            return _literal("\b")
        if char.isdigit():
            raise _PatternUnsupported("backreferences and octal escapes are not supported")
        if char in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[char]
            digits = self._text[self._pos : self._pos + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise _PatternUnsupported(f"bad \\{char} escape")
            self._pos += width
            return _literal(chr(int(digits, 16)))
        if char.isalpha():
            raise _PatternUnsupported(f"escape \\{char} is not supported")
        return _literal(char)

    def _char_class(self) -> _Node:
        negate = self._peek() == "^"
        if negate:
            self._pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            char = self._next()
            if char == "]" and not first:
                break
            first = False
            if char == "\\":
                escaped = self._escape(in_class=True)
                assert isinstance(escaped, _Chars)
                if len(escaped.ranges) != 1 or escaped.ranges[0][0] != escaped.ranges[0][1]:
                    ranges.extend(escaped.ranges)  # a set like \d: cannot start a range
                    continue
                start = escaped.ranges[0][0]
            else:
                start = ord(char)
            end = start
            if self._peek() == "-" and self._text[self._pos + 1 : self._pos + 2] not in ("", "]"):
                self._pos += 1
                high = self._next()
                if high == "\\":
                    escaped = self._escape(in_class=True)
                    assert isinstance(escaped, _Chars)
                    end = escaped.ranges[0][0]
                else:
                    end = ord(high)
                if end < start:
                    raise _PatternUnsupported("bad character range")
            ranges.append((start, end))
        result = tuple(ranges)
        if negate:
            result = _complement(result)
        if not result:
            raise _PatternUnsupported("empty character class")
        return _Chars(result)


def _literal(char: str) -> _Chars:
    return _Chars(((ord(char), ord(char)),))


def _complement(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Printable ASCII characters outside `ranges` (negated classes stay readable)."""
    excluded = sorted(ranges)
    result: list[tuple[int, int]] = []
    for low, high in _PRINTABLE:
        current = low
        for start, end in excluded:
            if end < current or start > high:
                continue
            if start > current:
                result.append((current, start - 1))
            current = max(current, end + 1)
        if current <= high:
            result.append((current, high))
    return tuple(result)


def _emit(node: _Node, rng: random.Random, out: list[str], boost: int) -> None:
    if isinstance(node, _Chars):
        total = sum(end - start + 1 for start, end in node.ranges)
        pick = rng.randrange(total)
        for start, end in node.ranges:
            size = end - start + 1
            if pick < size:
                out.append(chr(start + pick))
                return
            pick -= size
    elif isinstance(node, _Seq):
        for item in node.items:
            _emit(item, rng, out, boost)
    elif isinstance(node, _Alt):
        _emit(rng.choice(node.options), rng, out, boost)
    else:
        span = None if node.most is None else node.most - node.least
        if span is not None and span <= _REPEAT_SPREAD and boost == 0:
            count = rng.randint(node.least, node.least + span)
        else:
            extra_low, extra_high = max(0, boost), max(0, boost + _REPEAT_SPREAD)
            if span is not None:
                extra_low, extra_high = min(extra_low, span), min(extra_high, span)
            count = node.least + rng.randint(extra_low, extra_high)
        for _ in range(count):
            _emit(node.node, rng, out, boost)
