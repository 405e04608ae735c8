"""Hypothesis strategies of JSON Schemas, for every place a request carries one.

Two families: `tool_schemas` stay within the tool keyword whitelist (an object with
properties), so that they get past validation and reach the value generator; `any_schemas`
use every keyword (composition, `$ref`, `not`, `const`, ...). Both draw hostile values
often: catastrophic patterns, counts of a billion, huge enums, contradictions, self
references and nesting deeper than any walk of the schema should follow.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.support.fuzz import JUNK, Raw, json_scalars, pick

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
HOSTILE_PATTERNS = (
    "^(a+)+$",
    "(a|a)*b",
    "^(a|aa)+$",
    "(.*a){20}",
    "(a*)*$",
    "[",
    "(?<=a)b",
    r"(\w+)\1",
    "a{1000000}",
    "a{2,1}",
    "[a-z]{5000}",
    "x{999}y{999}",
    r"\p{L}",
    "(?i)abc",
    "a**",
    "^$",
    ".*",
    "\\",
    r"[^\s\S]",
    "((((((((((((((((((((a))))))))))))))))))))",
    "^[A-Z]{3}-[0-9]{4}$",
    r"^\d{1,3}(\.\d{1,3}){3}$",
    "(" * 200 + "a" + ")" * 200,
    "|" * 100,
)
FORMATS = (
    "date-time",
    "date",
    "time",
    "email",
    "idn-email",
    "uri",
    "uri-reference",
    "iri",
    "uuid",
    "ipv4",
    "ipv6",
    "hostname",
    "duration",
    "regex",
    "bogus",
    "",
)
REFS = (
    "#",
    "#/$defs/a",
    "#/definitions/a",
    "#/properties/p",
    "#/$defs/missing",
    "#/$defs/a/properties/b",
    "#/$defs/~1",
    "#/%25",
    "#anchor",
    "other.json#",
    "http://example.invalid/schema",
    "",
)
# Sizes a schema may ask for: small, at the generator's caps (100 items, 1,000 characters),
# a billion, negative, fractional and beyond 64 bits.
SIZES = (0, 1, 2, 5, 99, 100, 101, 999, 1000, 1001, 10**9, 1e9, -1, 0.5, 1.0, 2**63, 10**400)
BOUNDS = (0, -0.0, 1, -1, 0.1, 3, 1e-300, 5e-324, 1e308, -1e308, 2**53 + 1, 10**400, -(10**400))

names = st.text(max_size=8) | st.sampled_from(["a", "b", "p", "$ref", "__proto__", ""])
sizes = st.sampled_from(SIZES) | st.integers(0, 12)
bounds = st.sampled_from(BOUNDS) | st.integers(-100, 100) | st.floats(allow_nan=False)
big_enums = pick(
    [list(range(3000)), [f"v{i}" for i in range(2000)], [[i] for i in range(500)], [None] * 300]
)
scalars = json_scalars(8)
enums = st.lists(scalars, max_size=6) | big_enums


def _string_keywords() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "pattern": st.sampled_from(HOSTILE_PATTERNS) | st.text(max_size=12),
        "format": st.sampled_from(FORMATS),
        "minLength": sizes,
        "maxLength": sizes,
    }


def _number_keywords() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "minimum": bounds,
        "maximum": bounds,
        "exclusiveMinimum": bounds | st.booleans(),
        "exclusiveMaximum": bounds | st.booleans(),
        "multipleOf": st.sampled_from([0, -1, 0.5, 1e-300, 3, 0.1, 10**400, 1e308]),
    }


def _array_keywords() -> dict[str, st.SearchStrategy[Any]]:
    return {"minItems": sizes, "maxItems": sizes, "uniqueItems": st.booleans()}


KEYWORDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "string": _string_keywords(),
    "number": _number_keywords(),
    "integer": _number_keywords(),
    "array": _array_keywords(),
    "object": {
        "minProperties": sizes,
        "maxProperties": sizes,
        "additionalProperties": st.booleans(),
    },
    "boolean": {},
    "null": {},
}
ANY_TYPE = {"enum": enums, "const": scalars, "description": st.text(max_size=20)}
# Keywords outside the whitelist, or of the wrong type for the node they land on.
STRAYS: dict[str, st.SearchStrategy[Any]] = {
    **_string_keywords(),
    **_number_keywords(),
    **_array_keywords(),
    "$ref": st.sampled_from(REFS),
    "type": st.lists(st.sampled_from(TYPES), max_size=3) | JUNK,
    "required": st.lists(names, max_size=3) | JUNK,
    "dependentRequired": st.dictionaries(names, st.lists(names, max_size=2), max_size=2),
    "prefixItems": st.lists(st.just({"type": "string"}), max_size=3),
    "if": st.just({"type": "string"}),
    "unknownKeyword": JUNK,
}


@st.composite
def _typed(draw: st.DrawFn, children: st.SearchStrategy[Any] | None, whitelist: bool) -> Any:
    """One schema node: a type, a few keywords that fit it, now and then one that does not."""
    kind = draw(st.sampled_from(TYPES if children is not None else TYPES[2:]))
    schema: dict[str, Any] = {"type": kind}
    fitting = {**KEYWORDS[kind], **({} if kind in ("object", "array") else ANY_TYPE)}
    for key in draw(st.lists(st.sampled_from(sorted(fitting)), max_size=3, unique=True)):
        schema[key] = draw(fitting[key])
    if children is not None and kind == "object":
        properties: dict[str, Any] = draw(st.dictionaries(names, children, max_size=4))
        schema["properties"] = properties
        with_required = draw(st.booleans())
        if properties and with_required:
            schema["required"] = draw(st.lists(st.sampled_from(sorted(properties)), max_size=4))
    if children is not None and kind == "array":
        schema["items"] = draw(children)
    if draw(st.integers(0, 9)) == 0:
        stray = draw(st.sampled_from(sorted(STRAYS)))
        schema[stray] = draw(STRAYS[stray])
    if not whitelist and children is not None and draw(st.integers(0, 3)) == 0:
        schema.update(draw(_composition(children)))
    return schema


def _composition(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The keywords that combine or point at other schemas."""
    branches = st.lists(children, min_size=0, max_size=3)
    return st.fixed_dictionaries(
        {},
        optional={
            "anyOf": branches,
            "oneOf": branches,
            "allOf": branches,
            "not": children | st.just({}),
            "$ref": st.sampled_from(REFS),
            "$defs": st.fixed_dictionaries({"a": children}),
            "definitions": st.fixed_dictionaries({"a": children}),
            "additionalProperties": children,
        },
    )


def _tree(whitelist: bool, leaves: int) -> st.SearchStrategy[Any]:
    return st.recursive(
        _typed(None, whitelist),
        lambda inner: _typed(inner, whitelist),
        max_leaves=leaves,
    )


def _self_reference(required: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {"next": {"$ref": "#"}}}
    if required:
        schema["required"] = ["next"]
    return schema


def _nested_arrays(levels: int, min_items: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "array", "minItems": min_items, "items": schema}
    return schema


def deep_schema(depth: int, keyword: str) -> Raw:
    """`depth` nested sub-schemas, as text: deeper than any recursive walk may follow."""
    if keyword == "properties":
        head, tail = b'{"type":"object","properties":{"a":', b"}}"
    elif keyword == "items":
        head, tail = b'{"type":"array","items":', b"}"
    else:
        head, tail = b'{"anyOf":[', b"]}"
    return Raw(head * depth + b'{"type":"string"}' + tail * depth)


def _hostile() -> list[Any]:
    many = {f"p{i}": {"type": "string"} for i in range(500)}
    return [
        {"type": "string", "pattern": "^(a+)+$"},
        {"type": "string", "pattern": "^(a+)+$", "minLength": 40},
        {"type": "array", "minItems": 10**9, "items": {"type": "string"}},
        {"type": "array", "minItems": 1e9, "items": {"type": "string"}},
        {"type": "string", "minLength": 10**9},
        {"type": "string", "minLength": 1001},
        _self_reference(True),
        _self_reference(False),
        {"$ref": "#"},
        {"allOf": [{"$ref": "#"}]},
        {"anyOf": [{"$ref": "#"}, {"$ref": "#/anyOf/0"}]},
        _nested_arrays(10, 10),
        _nested_arrays(4, 100),
        {"type": "integer", "minimum": 10**400},
        {"type": "number", "multipleOf": 1e-300, "minimum": 0, "maximum": 1e308},
        {"type": "integer", "multipleOf": 0},
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"type": "array", "uniqueItems": True, "minItems": 50, "items": {"type": "boolean"}},
        {"type": "string", "enum": [f"v{i}" for i in range(5000)]},
        {"type": "object", "minProperties": 1000, "properties": {}},
        {"type": "object", "properties": many, "required": sorted(many)},
        {"type": "string", "format": "date-time", "pattern": "^x$"},
        {"not": {}},
        {"type": []},
        {},
        {"type": "string", "const": "x", "enum": ["y"]},
        {"oneOf": [{"type": "boolean"}, {"type": "boolean"}]},
        {"type": "object", "properties": {"a": {"type": "string"}}, "dependentRequired": {}},
    ]


HOSTILE = _hostile()
hostile_schemas = pick(HOSTILE) | st.builds(
    deep_schema,
    st.sampled_from([200, 999, 1000, 3000]),
    st.sampled_from(["properties", "items", "anyOf"]),
)


def tool_schemas() -> st.SearchStrategy[Any]:
    """Tool parameters: mostly whitelisted objects with properties, sometimes hostile."""
    objects = st.builds(
        lambda properties, required: {
            "type": "object",
            "properties": properties,
            **({"required": required} if required else {}),
        },
        st.dictionaries(names, _tree(True, 6), max_size=4),
        st.lists(names, max_size=2),
    )
    return st.one_of(objects, objects, objects, hostile_schemas, _tree(False, 6), JUNK)


def any_schemas() -> st.SearchStrategy[Any]:
    """Response formats and the like: every keyword, often hostile."""
    return st.one_of(_tree(False, 8), _tree(False, 8), hostile_schemas, tool_schemas())


# Deferred, as tests.support.fuzz.JUNK, for a short repr.
TOOL_SCHEMAS = st.deferred(tool_schemas)
ANY_SCHEMAS = st.deferred(any_schemas)
