"""JSON Schema instance generation: the tool-parameter basics and the schema extensions."""

from __future__ import annotations

import datetime
import importlib
import ipaddress
import json
import random
import re
import statistics
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_sim.schemagen import WORDS, SynthesisError, SynthesisSettings, arguments_json, synthesize

# Imported by name so mypy does not need stubs for the (untyped) jsonschema package.
jsonschema: Any = importlib.import_module("jsonschema")

# The corpus is shared with the chat feature tests.
SCHEMAS = Path(__file__).parents[2] / "support" / "schemas_corpus"
CORPUS = sorted(SCHEMAS.glob("*.json"))
DEFAULT = SynthesisSettings()
ALL_OPTIONAL = SynthesisSettings(optional_param_probability=100, optional_field_probability=100)
DRAWS = 4000


def gen(schema: dict[str, Any], seed: int = 0, settings: SynthesisSettings = DEFAULT) -> Any:
    return synthesize(random.Random(seed), schema, settings)


def many(
    schema: dict[str, Any], n: int = DRAWS, settings: SynthesisSettings = DEFAULT
) -> list[Any]:
    rng = random.Random(1234)
    return [synthesize(rng, schema, settings) for _ in range(n)]


def prop(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool-parameters object whose single required property `x` has `schema`."""
    return {"type": "object", "properties": {"x": schema}, "required": ["x"]}


def xs(schema: dict[str, Any], n: int = DRAWS, settings: SynthesisSettings = DEFAULT) -> list[Any]:
    return [value["x"] for value in many(prop(schema), n, settings)]


# ---- validation helpers --------------------------------------------------------------------

_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
_TIME = re.compile(r"\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#]+[^\s]*")
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
)
_DURATION = re.compile(r"P(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(\d+H)?(\d+M)?(\d+S)?)?")


def _strict(check: Callable[[str], bool]) -> Callable[[object], bool]:
    def checker(instance: object) -> bool:
        return not isinstance(instance, str) or check(instance)

    return checker


def _is_date_time(text: str) -> bool:
    return bool(_DATE_TIME.fullmatch(text)) and bool(datetime.datetime.fromisoformat(text))


def _is_time(text: str) -> bool:
    return bool(_TIME.fullmatch(text)) and bool(
        datetime.datetime.fromisoformat("1970-01-01T" + text)
    )


# jsonschema checks date-time, time, uri, hostname and duration only when optional packages
# are installed; these stand-ins keep the corpus test strict without them.
_EXTRA_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _is_date_time,
    "time": _is_time,
    "uri": lambda s: bool(_URI.fullmatch(s)),
    "uri-reference": lambda s: not re.search(r"\s", s),
    "hostname": lambda s: bool(_HOSTNAME.fullmatch(s)),
    "duration": lambda s: s != "P" and bool(_DURATION.fullmatch(s)),
}


def format_checker() -> Any:
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
    for name, check in _EXTRA_FORMATS.items():
        if name not in checker.checkers:
            checker.checks(name, raises=ValueError)(_strict(check))
    return checker


def validator(schema: dict[str, Any]) -> Any:
    # Draft 2020-12 unless the schema names an older draft with `$schema` (tuple `items`,
    # boolean `exclusiveMinimum`).
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=format_checker())


def assert_valid(schema: dict[str, Any], values: list[Any]) -> None:
    check = validator(schema)
    for value in values:
        errors = list(check.iter_errors(value))
        assert not errors, f"{arguments_json(value)}: {errors[0].message}"


def load_schema(path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


# ---- corpus --------------------------------------------------------------------------------


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 25


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_output_validates(path: Path) -> None:
    schema = load_schema(path)
    check = validator(schema)
    for settings in (DEFAULT, ALL_OPTIONAL):
        for seed in range(200):
            value = synthesize(random.Random(seed), schema, settings)
            errors = list(check.iter_errors(value))
            assert not errors, f"seed {seed}: {arguments_json(value)}: {errors[0].message}"
            assert json.loads(arguments_json(value)) == value


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_validates_with_unusual_server_ranges(path: Path) -> None:
    schema = load_schema(path)
    settings = SynthesisSettings(
        min_integer=-1000,
        max_integer=-900,
        min_number=-5.5,
        max_number=-5.0,
        min_items=0,
        max_items=8,
        optional_param_probability=0,
        optional_field_probability=90,
    )
    check = validator(schema)
    for seed in range(50):
        value = synthesize(random.Random(seed), schema, settings)
        errors = list(check.iter_errors(value))
        assert not errors, f"seed {seed}: {arguments_json(value)}: {errors[0].message}"


def test_corpus_covers_optional_branches() -> None:
    # With every optional property included, each corpus schema yields several distinct values.
    for path in CORPUS:
        schema = load_schema(path)
        outputs = {arguments_json(gen(schema, seed, ALL_OPTIONAL)) for seed in range(20)}
        assert len(outputs) > 1, path.name


# ---- determinism ---------------------------------------------------------------------------


def test_same_seed_same_output() -> None:
    schema = load_schema(SCHEMAS / "flight_booking.json")
    first = [arguments_json(gen(schema, seed)) for seed in range(20)]
    second = [arguments_json(gen(schema, seed)) for seed in range(20)]
    assert first == second
    assert len(set(first)) == 20


def test_uses_only_the_given_rng() -> None:
    schema = load_schema(SCHEMAS / "k8s_deployment.json")
    random.seed(1)
    before = random.getstate()
    gen(schema, 5)
    assert random.getstate() == before


# ---- values by schema ----------------------------------------------------------------------


def test_enum_is_a_uniform_pick_whatever_the_type() -> None:
    values = xs({"type": "string", "enum": ["a", "b", "c", "d"]})
    counts = Counter(values)
    assert set(counts) == {"a", "b", "c", "d"}
    assert all(abs(c - DRAWS / 4) < DRAWS * 0.04 for c in counts.values())
    assert set(xs({"type": "integer", "enum": [3, 7]}, 200)) == {3, 7}
    assert set(xs({"enum": ["x", 2, None]}, 200)) == {"x", 2, None}


def test_empty_enum_falls_back_to_the_type() -> None:
    assert set(xs({"type": "string", "enum": []}, 300)) == set(WORDS)


def test_string_is_one_of_the_ten_words_uniformly() -> None:
    counts = Counter(xs({"type": "string"}))
    assert set(counts) == set(WORDS)
    assert len(WORDS) == 10
    assert all(abs(c - DRAWS / 10) < DRAWS * 0.03 for c in counts.values())


def test_integer_is_uniform_inclusive_in_the_server_range() -> None:
    settings = SynthesisSettings(min_integer=3, max_integer=6)
    counts = Counter(xs({"type": "integer"}, settings=settings))
    assert set(counts) == {3, 4, 5, 6}
    assert all(abs(c - DRAWS / 4) < DRAWS * 0.04 for c in counts.values())
    assert all(type(v) is int for v in counts)


def test_number_is_uniform_in_half_open_server_range() -> None:
    settings = SynthesisSettings(min_number=1.0, max_number=2.0)
    values = xs({"type": "number"}, settings=settings)
    assert all(1.0 <= v < 2.0 for v in values)
    assert abs(statistics.fmean(values) - 1.5) < 0.02
    assert min(values) < 1.01 and max(values) > 1.99


def test_default_ranges() -> None:
    assert all(0 <= v <= 100 for v in xs({"type": "integer"}))
    assert {0, 100} <= set(xs({"type": "integer"}, 20_000))
    assert all(0 <= v < 100 for v in xs({"type": "number"}))


def test_boolean_is_a_coin_flip() -> None:
    values = xs({"type": "boolean"})
    assert set(values) == {True, False}
    assert abs(sum(values) - DRAWS / 2) < DRAWS * 0.04


def test_array_length_uses_server_defaults() -> None:
    lengths = Counter(len(v) for v in xs({"type": "array", "items": {"type": "integer"}}))
    assert set(lengths) == {1, 2, 3, 4, 5}
    assert all(abs(c - DRAWS / 5) < DRAWS * 0.04 for c in lengths.values())


def test_array_length_schema_values_override_server_values() -> None:
    schema = {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3}
    assert {len(v) for v in xs(schema, 500)} == {2, 3}
    settings = SynthesisSettings(min_items=0, max_items=2)
    assert {len(v) for v in xs({"type": "array", "items": {"type": "boolean"}}, 500, settings)} == {
        0,
        1,
        2,
    }


def test_array_min_greater_than_max_is_an_error() -> None:
    schema = prop({"type": "array", "items": {"type": "string"}, "minItems": 4, "maxItems": 2})
    with pytest.raises(
        SynthesisError, match=r"minItems \(4\) is greater than maxItems\(2\)"
    ) as err:
        gen(schema)
    assert "$.properties.x" in str(err.value)


def test_array_elements_come_from_items() -> None:
    values = xs({"type": "array", "items": {"type": "string", "enum": ["p", "q"]}}, 200)
    assert {e for v in values for e in v} == {"p", "q"}


def test_required_always_and_optional_with_probability() -> None:
    schema = {
        "type": "object",
        "properties": {"r": {"type": "integer"}, "o": {"type": "integer"}},
        "required": ["r"],
    }
    for percent in (0, 30, 100):
        settings = SynthesisSettings(optional_param_probability=percent)
        values = many(schema, settings=settings)
        assert all("r" in v for v in values)
        share = sum("o" in v for v in values) / DRAWS
        assert abs(share - percent / 100) < 0.03


def test_top_level_and_nested_optional_probabilities_are_separate() -> None:
    schema = {
        "type": "object",
        "properties": {
            "top": {"type": "string"},
            "nested": {"type": "object", "properties": {"inner": {"type": "string"}}},
        },
        "required": ["nested"],
    }
    settings = SynthesisSettings(optional_param_probability=100, optional_field_probability=0)
    assert all(
        v.keys() == {"top", "nested"} and v["nested"] == {} for v in many(schema, 200, settings)
    )
    settings = SynthesisSettings(optional_param_probability=0, optional_field_probability=100)
    assert all(
        v == {"nested": {"inner": v["nested"]["inner"]}} for v in many(schema, 200, settings)
    )


def test_top_level_false_uses_the_field_probability_at_the_root() -> None:
    schema = {"type": "object", "properties": {"o": {"type": "string"}}}
    settings = SynthesisSettings(optional_param_probability=100, optional_field_probability=0)
    rng = random.Random(3)
    assert all(synthesize(rng, schema, settings, top_level=False) == {} for _ in range(100))
    assert all("o" in synthesize(rng, schema, settings) for _ in range(100))


def test_nested_objects_keep_required_fields() -> None:
    schema = prop(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a"],
        }
    )
    settings = SynthesisSettings(optional_field_probability=0)
    assert all(v == {"a": v["a"]} for v in xs(schema["properties"]["x"], 200, settings))


def test_object_without_properties_is_empty() -> None:
    assert gen({"type": "object"}) == {}
    assert xs({"type": "object"}, 10) == [{}] * 10


def test_missing_type_with_properties_is_an_object() -> None:
    value = gen({"properties": {"a": {"type": "boolean"}}, "required": ["a"]})
    assert isinstance(value["a"], bool)


@pytest.mark.parametrize(
    ("schema", "shown"),
    [
        ({"type": "null"}, "null"),
        ({"description": "no type"}, "(missing)"),
        ({"type": "date"}, "date"),
        ({"type": ["null"]}, "null"),
        ({"type": ["foo", "bar"]}, "foo"),
    ],
)
def test_unsupported_types(schema: dict[str, Any], shown: str) -> None:
    with pytest.raises(SynthesisError) as err:
        gen(prop(schema))
    assert str(err.value) == f"tool parameters of type {shown} are not supported at $.properties.x"


def test_synthesis_error_is_a_value_error() -> None:
    assert issubclass(SynthesisError, ValueError)


def test_keys_follow_declaration_order_and_values_are_json() -> None:
    schema = load_schema(SCHEMAS / "calendar_event.json")
    value = gen(schema, 7, ALL_OPTIONAL)
    assert list(value) == list(schema["properties"])


# ---- numeric bounds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "low", "high"),
    [
        ({"minimum": 50}, 50, 100),
        ({"maximum": 10}, 0, 10),
        ({"minimum": 500}, 500, 600),  # above the server range: a window of the same width
        ({"maximum": -10}, -110, -10),
        ({"minimum": 1000, "maximum": 2000}, 1000, 2000),  # disjoint: the schema wins
        ({"minimum": 20, "maximum": 30}, 20, 30),
        ({"exclusiveMinimum": 5, "exclusiveMaximum": 9}, 6, 8),
        ({"minimum": 1.5, "maximum": 3.5}, 2, 3),
        ({"minimum": 7, "maximum": 7}, 7, 7),
    ],
)
def test_integer_bounds(schema: dict[str, Any], low: int, high: int) -> None:
    values = xs({"type": "integer", **schema}, 2000)
    assert min(values) == low and max(values) == high


@pytest.mark.parametrize(
    ("schema", "low", "high"),
    [
        ({"minimum": 50}, 50, 100),
        ({"exclusiveMinimum": 0, "maximum": 1}, 0, 1),
        ({"exclusiveMaximum": 0}, -100, 0),
        ({"minimum": 1e6}, 1e6, 1e6 + 100),
        ({"minimum": -3, "exclusiveMaximum": -2}, -3, -2),
    ],
)
def test_number_bounds(schema: dict[str, Any], low: float, high: float) -> None:
    full = {"type": "number", **schema}
    values = xs(full, 2000)
    assert all(low <= v <= high for v in values)
    assert_valid(full, values)


def test_number_with_equal_inclusive_bounds() -> None:
    assert set(xs({"type": "number", "minimum": 2.5, "maximum": 2.5}, 20)) == {2.5}


def test_multiple_of() -> None:
    ints = xs({"type": "integer", "minimum": 0, "maximum": 300, "multipleOf": 25}, 500)
    assert set(ints) == {0, 25, 50, 75, 100}  # narrowed to the server range
    prices = {"type": "number", "exclusiveMinimum": 0, "maximum": 50, "multipleOf": 0.01}
    values = xs(prices, 500)
    assert all(len(repr(v).split(".")[-1]) <= 2 for v in values)
    assert_valid(prices, values)
    halves = {"type": "integer", "minimum": 0, "maximum": 4, "multipleOf": 0.5}
    assert set(xs(halves, 300)) == {0, 1, 2, 3, 4}
    assert set(xs({"type": "integer", "maximum": 40, "multipleOf": 20.0}, 300)) == {0, 20, 40}


def test_impossible_bounds_are_errors() -> None:
    with pytest.raises(SynthesisError, match=r"no integer between 4 and 3 at \$\.properties\.x"):
        gen(prop({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4}))
    with pytest.raises(SynthesisError, match="no number"):
        gen(prop({"type": "number", "minimum": 5, "maximum": 4}))
    with pytest.raises(SynthesisError, match="no multiple of 1000"):
        gen(prop({"type": "integer", "minimum": 1, "maximum": 900, "multipleOf": 1000}))


def test_draft4_boolean_exclusive_bounds() -> None:
    values = xs({"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 2}, 300)
    assert set(values) == {1, 2}
    values = xs({"type": "integer", "maximum": 3, "exclusiveMaximum": False}, 300)
    assert max(values) == 3


# ---- strings -------------------------------------------------------------------------------


def test_min_length_pads_and_max_length_trims() -> None:
    for value in xs({"type": "string", "minLength": 15}, 300):
        assert len(value) >= 15
        assert value.split(" ")[0] in WORDS
    assert all(len(v) <= 3 for v in xs({"type": "string", "maxLength": 3}, 300))
    assert set(xs({"type": "string", "maxLength": 0}, 20)) == {""}
    exact = xs({"type": "string", "minLength": 9, "maxLength": 9}, 300)
    assert all(len(v) == 9 for v in exact)
    assert "hello hel" in exact  # padded with the word, then trimmed to the maximum
    trimmed = xs({"type": "string", "maxLength": 3}, 300)
    assert {"tes", "hel", "Bos", "Yor"} <= set(trimmed)


def test_min_length_above_max_length_is_an_error() -> None:
    with pytest.raises(SynthesisError, match=r"minLength \(5\) is greater than maxLength \(2\)"):
        gen(prop({"type": "string", "minLength": 5, "maxLength": 2}))


@pytest.mark.parametrize(
    ("fmt", "check"),
    [
        ("date-time", _is_date_time),
        ("date", lambda s: bool(datetime.date.fromisoformat(s)) and len(s) == 10),
        ("time", _is_time),
        ("email", lambda s: re.fullmatch(r"[a-z]+@example\.com", s) is not None),
        ("uri", lambda s: bool(_URI.fullmatch(s))),
        ("uuid", lambda s: uuid.UUID(s).version == 4 and str(uuid.UUID(s)) == s),
        ("ipv4", lambda s: str(ipaddress.IPv4Address(s)) == s),
        ("ipv6", lambda s: str(ipaddress.IPv6Address(s)) == s),
        ("hostname", lambda s: bool(_HOSTNAME.fullmatch(s))),
        ("duration", lambda s: bool(_DURATION.fullmatch(s))),
    ],
)
def test_formats(fmt: str, check: Callable[[str], bool]) -> None:
    values = xs({"type": "string", "format": fmt}, 300)
    assert all(check(v) for v in values), values[:5]
    assert len(set(values)) > 1
    assert_valid({"type": "string", "format": fmt}, values)


def test_unknown_format_is_an_annotation() -> None:
    assert set(xs({"type": "string", "format": "color-name"}, 300)) == set(WORDS)


def test_format_that_cannot_meet_the_length_is_an_error() -> None:
    with pytest.raises(SynthesisError, match="uuid"):
        gen(prop({"type": "string", "format": "uuid", "maxLength": 10}))


@pytest.mark.parametrize(
    "pattern",
    [
        r"^[A-Z]{3}$",
        r"^\d{5}(-\d{4})?$",
        r"^[a-z][a-z0-9_]{2,15}$",
        r"^\w+@\w+\.(com|org|net)$",
        r"^#[0-9a-fA-F]{6}$",
        r"^(0[1-9]|1[0-2])/\d{2}$",
        r"^v\d+\.\d+\.\d+(-rc\.\d+)?$",
        r"^[^\s@]+@[^\s@]+$",
        r"^[A-Z]{2}\d{2}[A-Z0-9]{11,30}$",
        r"^\+?[1-9]\d{1,14}$",
        r"^[a-z]+(?:-[a-z]+)*$",
        r"^(?P<year>\d{4})-(?P<month>\d\d)?",
        r"ab*c+d?e{2}f{1,}g{,2}",
        r"^\.\*\?\[\]\(\)\{\}\\\/$",
        r"^[\w.-]+$",
        r"^\S+\s\S+$",
        r"^[^a-z]{4}$",
        r"^\x41\u00e9[\u4e00-\u4e05]$",
        r"\bword\b",
        r"^a|b$",
        r"colou?r",
        r"^.{3,5}$",
        r"^[-+]?[0-9]*\.?[0-9]+$",
        r"^[]a]+$",
        r"^[a\-z]+$",
        r"^x{2}?y+?z*+$",
        r"^$",
    ],
)
def test_patterns_generate_matching_strings(pattern: str) -> None:
    values = xs({"type": "string", "pattern": pattern}, 200)
    assert all(re.search(pattern, v) for v in values), values[:5]


def test_patterns_are_combined_with_lengths() -> None:
    slug = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
    values = xs({"type": "string", "pattern": slug, "minLength": 30}, 300)
    assert all(len(v) >= 30 and re.fullmatch(slug, v) for v in values)
    short = xs({"type": "string", "pattern": r"^[a-z]+$", "maxLength": 2}, 300)
    assert all(1 <= len(v) <= 2 for v in short)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"pattern": r"^(a)\1$"}, "backreferences"),
        ({"pattern": r"^(?=a)a$"}, "lookarounds"),
        ({"pattern": r"(?i)abc"}, "lookarounds and inline flags"),
        ({"pattern": r"\p{L}"}, "invalid pattern"),
        ({"pattern": r"^\d{3}$", "minLength": 5}, "cannot generate a string matching pattern"),
        ({"pattern": r"^a$x"}, "cannot generate a string matching pattern"),
        ({"pattern": r"[z-a]"}, "invalid pattern"),
        ({"pattern": r"("}, "invalid pattern"),
    ],
)
def test_unsatisfiable_patterns_are_errors(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(SynthesisError, match=re.escape(message)) as err:
        gen(prop({"type": "string", **schema}))
    assert str(err.value).endswith("at $.properties.x")


# ---- const, type arrays, anyOf / oneOf / allOf --------------------------------------------


def test_const() -> None:
    assert xs({"const": {"a": [1, "b"]}}, 3) == [{"a": [1, "b"]}] * 3
    assert xs({"type": "string", "const": "fixed"}, 3) == ["fixed"] * 3


def test_const_values_are_copies() -> None:
    schema = prop({"const": {"a": [1]}})
    value = gen(schema)
    value["x"]["a"].append(2)
    assert schema["properties"]["x"]["const"] == {"a": [1]}


def test_type_array_picks_each_type() -> None:
    values = xs({"type": ["string", "integer", "null"]}, 600)
    kinds = Counter(type(v).__name__ for v in values)
    assert set(kinds) == {"str", "int", "NoneType"}
    assert all(abs(c - 200) < 60 for c in kinds.values())


def test_any_of_picks_each_branch() -> None:
    schema = {
        "anyOf": [{"type": "boolean"}, {"type": "string", "format": "ipv4"}, {"type": "null"}]
    }
    kinds = Counter(type(v).__name__ for v in xs(schema, 600))
    assert set(kinds) == {"bool", "str", "NoneType"}


def test_any_of_merges_sibling_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "required": ["id"],
        "anyOf": [
            {"required": ["a"], "properties": {"a": {"type": "string"}}},
            {"required": ["b"]},
        ],
    }
    values = xs(schema, 200)
    assert all("id" in v and ("a" in v or "b" in v) for v in values)
    assert_valid(schema, values)


def test_one_of_avoids_values_matching_several_branches() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    values = xs(schema, 500)
    # Every integer is also a number, so only non-integral numbers satisfy this oneOf.
    assert all(isinstance(v, float) and not v.is_integer() for v in values)
    assert_valid(schema, values)
    overlapping = {
        "oneOf": [{"type": "string", "maxLength": 5}, {"type": "string", "minLength": 6}]
    }
    assert_valid(overlapping, xs(overlapping, 300))


def test_one_of_with_discriminator_const() -> None:
    schema = load_schema(SCHEMAS / "shape_oneof.json")["properties"]["shape"]
    kinds = Counter(v["kind"] for v in xs(schema, 300))
    assert set(kinds) == {"circle", "rectangle", "polygon"}


def test_all_of_merges_branches() -> None:
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 10}}},
            {"properties": {"a": {"maximum": 12}, "b": {"type": "string"}}, "required": ["a", "b"]},
        ]
    }
    values = xs(schema, 300)
    assert {v["a"] for v in values} == {10, 11, 12}
    assert all(v["b"] in WORDS for v in values)
    assert_valid(schema, values)


def test_all_of_respects_additional_properties_false_in_a_branch() -> None:
    schema = {
        "allOf": [
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "additionalProperties": False,
            },
            {"properties": {"b": {"type": "integer"}}},
        ]
    }
    values = xs(schema, 200, ALL_OPTIONAL)
    assert all(set(v) == {"a"} for v in values)
    assert_valid(schema, values)
    required = {"allOf": [schema["allOf"][0], {"required": ["b"]}]}
    with pytest.raises(SynthesisError, match="'b' is not allowed"):
        gen(prop(required))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "nothing in common"),
        ({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]}, "no value in common"),
        ({"allOf": [{"const": 1}, {"const": 2}]}, "consts differ"),
        ({"allOf": [{"type": "string", "format": "date"}, {"format": "uuid"}]}, "formats differ"),
        ({"allOf": []}, "allOf must be a non-empty array"),
        ({"anyOf": "x"}, "anyOf must be a non-empty array"),
        ({"allOf": [False]}, "schema false admits no value"),
        ({"type": "string", "enum": [1, 2]}, "no enum value satisfies the schema (type string)"),
        ({"type": "integer", "minimum": "1"}, "minimum must be a finite number"),
        ({"type": "array", "items": {"type": "integer"}, "minItems": -1}, "minItems must be"),
    ],
)
def test_contradictions_are_errors(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(SynthesisError, match=re.escape(message)):
        gen(prop(schema))


def test_all_of_patterns_must_all_match() -> None:
    schema = {"allOf": [{"type": "string", "pattern": "^[A-Z]+$"}, {"pattern": "^.{3}$"}]}
    assert all(re.fullmatch("[A-Z]{3}", v) for v in xs(schema, 200))


# ---- $ref and recursion --------------------------------------------------------------------


def _depth(node: dict[str, Any]) -> int:
    return 1 + max((_depth(child) for child in node["children"]), default=0)


def test_ref_recursion_is_bounded() -> None:
    schema = load_schema(SCHEMAS / "tree_defs.json")
    # The root node is one $ref deep; beyond five the children list is empty. With the
    # server's minimum of one element, every branch reaches that depth.
    assert {_depth(v["root"]) for v in many(schema, 100)} == {5}
    shallow = SynthesisSettings(min_items=0)
    assert {_depth(v["root"]) for v in many(schema, 300, shallow)} == {1, 2, 3, 4, 5}
    assert_valid(schema, many(schema, 100))


def test_deep_recursion_prefers_null_and_required_only() -> None:
    schema = load_schema(SCHEMAS / "linked_list_definitions.json")
    lengths = []
    for value in many(schema, 300):
        node, length = value["head"], 0
        while node is not None:
            node, length = node["next"], length + 1
        lengths.append(length)
    assert max(lengths) <= 5
    assert 1 in lengths


def test_ref_to_the_root_and_to_definitions() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "parent": {"$ref": "#"}},
        "required": ["name"],
    }
    assert_valid(schema, many(schema, 200, ALL_OPTIONAL))


def test_infinite_required_recursion_is_an_error() -> None:
    schema = {
        "$defs": {
            "n": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/n"}},
                "required": ["next"],
            }
        },
        "type": "object",
        "properties": {"head": {"$ref": "#/$defs/n"}},
        "required": ["head"],
    }
    with pytest.raises(SynthesisError, match="recursive schema never terminates"):
        gen(schema)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("https://example.com/schema.json", "only references inside the schema"),
        ("#node", "anchors are not supported"),
        ("#/$defs/missing", "unresolvable $ref '#/$defs/missing' at $.properties.x"),
        ("#/properties/x/items/7", "unresolvable"),
    ],
)
def test_unsupported_refs(ref: str, message: str) -> None:
    with pytest.raises(SynthesisError, match=re.escape(message)):
        gen(prop({"$ref": ref}))


def test_error_paths_follow_refs() -> None:
    schema = {
        "$defs": {
            "bad": {"type": "object", "properties": {"z": {"type": "null"}}, "required": ["z"]}
        },
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/bad"}},
        "required": ["x"],
    }
    with pytest.raises(SynthesisError, match=re.escape("at $.$defs.bad.properties.z")):
        gen(schema)


def test_null_is_allowed_in_unions_only() -> None:
    assert set(xs({"anyOf": [{"type": "null"}]}, 5)) == {None}
    assert None in xs({"type": ["null", "string"]}, 100)


# ---- arrays --------------------------------------------------------------------------------


def test_prefix_items_generate_one_element_per_position() -> None:
    schema = {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}],
        "items": False,
    }
    for value in xs(schema, 200):
        assert [type(e) for e in value] == [int, str, bool]


def test_array_form_items_generate_one_element_per_position() -> None:
    schema = {"type": "array", "items": [{"type": "integer"}, {"const": "k"}]}
    assert all(len(v) == 2 and v[1] == "k" for v in xs(schema, 100))


def test_tuple_extra_items_up_to_min_items() -> None:
    schema = {"type": "array", "prefixItems": [{"const": 0}], "items": {"const": 1}, "minItems": 3}
    assert xs(schema, 5) == [[0, 1, 1]] * 5
    closed = {"type": "array", "prefixItems": [{"const": 0}], "items": False, "minItems": 3}
    with pytest.raises(SynthesisError, match="only 1 are allowed"):
        gen(prop(closed))


def test_unique_items_retry_then_shorten() -> None:
    schema = {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "maxItems": 5}
    values = xs(schema, 500)
    assert all(len(v) == len(set(v)) for v in values)
    assert {len(v) for v in values} == {1, 2}
    lottery = {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 49},
        "uniqueItems": True,
        "minItems": 6,
        "maxItems": 6,
    }
    assert all(len(set(v)) == 6 for v in xs(lottery, 300))


def test_unique_items_impossible_is_an_error() -> None:
    schema = {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 3}
    with pytest.raises(SynthesisError, match="cannot generate 3 unique items"):
        gen(prop(schema))


def test_unique_items_uses_json_equality() -> None:
    schema = {
        "type": "array",
        "items": {"enum": [1, 1.0, True]},
        "uniqueItems": True,
        "minItems": 2,
    }
    for value in xs(schema, 100):
        assert len(value) == 2 and True in value and any(v is not True for v in value)


def test_array_without_items_and_one_sided_lengths() -> None:
    assert all(isinstance(e, str) for v in xs({"type": "array"}, 100) for e in v)
    long = xs({"type": "array", "items": {"type": "integer"}, "minItems": 7}, 300)
    assert {len(v) for v in long} == {7, 8, 9, 10, 11}
    assert set(
        map(len, xs({"type": "array", "items": {"type": "integer"}, "maxItems": 0}, 20))
    ) == {0}


# ---- objects -------------------------------------------------------------------------------


def test_dependent_required_and_property_counts() -> None:
    schema = load_schema(SCHEMAS / "billing_dependencies.json")
    for settings in (DEFAULT, ALL_OPTIONAL, SynthesisSettings(optional_param_probability=0)):
        values = many(schema, 300, settings)
        assert all(3 <= len(v) <= 5 for v in values)
        assert_valid(schema, values)


def test_required_but_undeclared_property() -> None:
    schema = {"type": "object", "required": ["a"], "additionalProperties": {"type": "integer"}}
    assert all(isinstance(v["a"], int) for v in many(schema, 50))
    assert all(v["a"] in WORDS for v in many({"type": "object", "required": ["a"]}, 50))


def test_additional_properties_are_not_generated() -> None:
    schema = load_schema(SCHEMAS / "k8s_deployment.json")
    for value in many(schema, 100, ALL_OPTIONAL):
        assert set(value["labels"]) <= {"app", "tier", "version"}


# ---- arguments_json ------------------------------------------------------------------------


def test_arguments_json_is_compact_with_sorted_keys_everywhere() -> None:
    value = {"b": 1, "a": {"z": [{"y": 1, "x": 2}], "c": None}, "é": True}
    assert arguments_json(value) == '{"a":{"c":null,"z":[{"x":2,"y":1}]},"b":1,"é":true}'


def test_arguments_json_escapes_like_go() -> None:
    text = arguments_json({"k<>&": "<b>Tom & Jerry</b>", "n": "日本\u2028\u2029", "q": 'a"\\'})
    assert text == (
        '{"k\\u003c\\u003e\\u0026":"\\u003cb\\u003eTom \\u0026 Jerry\\u003c/b\\u003e",'
        '"n":"日本\\u2028\\u2029","q":"a\\"\\\\"}'
    )
    assert json.loads(text) == {"k<>&": "<b>Tom & Jerry</b>", "n": "日本\u2028\u2029", "q": 'a"\\'}


def test_arguments_json_example_from_spec() -> None:
    assert arguments_json({"location": "Boston"}) == '{"location":"Boston"}'


def test_arguments_json_rejects_nan() -> None:
    with pytest.raises(ValueError):
        arguments_json({"x": float("nan")})


# ---- settings ------------------------------------------------------------------------------


def test_settings_defaults_match_the_spec() -> None:
    assert SynthesisSettings(0, 100, 0.0, 100.0, 1, 5, 50, 50, 45) == DEFAULT


# ---- interplay of keywords -----------------------------------------------------------------


def test_enum_values_the_rest_of_the_schema_rejects_are_skipped() -> None:
    assert set(xs({"type": "integer", "enum": [1, 5, 10, "a"], "minimum": 4}, 200)) == {5, 10}
    assert set(xs({"type": "integer", "enum": [2, 3, 4], "multipleOf": 2}, 200)) == {2, 4}
    assert set(xs({"type": "string", "enum": ["ab", "abcdef"], "maxLength": 3}, 50)) == {"ab"}


def test_format_is_kept_when_it_also_matches_the_pattern() -> None:
    schema = {"type": "string", "format": "email", "pattern": "^[^@]+@[^@]+$"}
    values = xs(schema, 200)
    assert all(re.fullmatch(r"[a-z]+@example\.com", v) for v in values)


def test_pattern_wins_over_an_incompatible_format() -> None:
    values = xs({"type": "string", "format": "uuid", "pattern": "^[a-c]{2}$"}, 100)
    assert all(re.fullmatch("[a-c]{2}", v) for v in values)


def test_unanchored_pattern_is_padded_to_min_length() -> None:
    values = xs({"type": "string", "pattern": "x", "minLength": 10, "maxLength": 12}, 200)
    assert all("x" in v and 10 <= len(v) <= 12 for v in values)
