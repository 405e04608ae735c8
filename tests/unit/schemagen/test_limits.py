"""Hostile schemas: each is answered in milliseconds with a valid value or a SynthesisError
naming the schema path, never a freeze or an exception of another class. Synthesis runs on
the event loop, so the CPU time of each is checked too, and the legitimate corpus schemas
must take a fraction of the deadline."""

from __future__ import annotations

import importlib
import json
import random
import re
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from vllm_sim.schemagen import SynthesisError, SynthesisSettings, synthesize
from vllm_sim.schemagen.limits import (
    DEADLINE_SECONDS,
    MAX_ITEMS,
    MAX_NODES,
    MAX_PATTERN_LENGTH,
    MAX_PROPERTIES,
    MAX_STRING_LENGTH,
)
from vllm_sim.schemagen.pattern import pattern_search

jsonschema: Any = importlib.import_module("jsonschema")


def _object(prop: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": prop}, "required": ["x"]}


def _nested_arrays(depth: int, count: int = 10) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "minItems": count}
    return schema


BACKTRACKING = {"type": "string", "pattern": "^(a+)+$", "enum": ["a" * 34 + "!"]}
UNSATISFIABLE = {"type": "string", "minLength": 5, "maxLength": 2}
ENUM_4000 = [f"v{i}" for i in range(4000)]
CORPUS = sorted((Path(__file__).parents[2] / "support" / "schemas_corpus").glob("*.json"))


def _unique(items: dict[str, Any], count: int = MAX_ITEMS) -> dict[str, Any]:
    return _object({"type": "array", "uniqueItems": True, "minItems": count, "items": items})


# name -> (schema, the error fragment, or None when a valid value is expected)
CASES: dict[str, tuple[dict[str, Any], str | None]] = {
    "backtracking_enum": (_object(BACKTRACKING), "no enum value"),
    "backtracking_one_of": (
        _object({"oneOf": [{"type": "string", "pattern": "^(a+)+$"}, {"enum": ["a" * 34]}]}),
        None,
    ),
    "min_items_1e9": (
        _object({"type": "array", "items": {"type": "string"}, "minItems": 1e9}),
        "minItems",
    ),
    "min_items_1e30": (_object({"type": "array", "items": True, "minItems": 10**30}), "minItems"),
    "min_items_1e400": (_object({"type": "array", "items": True, "minItems": 10**400}), "minItems"),
    "min_length_1e9": (_object({"type": "string", "minLength": 10**9}), "minLength"),
    "min_length_1e400": (_object({"type": "string", "minLength": 10**400}), "minLength"),
    "huge_repeat": (_object({"type": "string", "pattern": "^a{1000000000}$"}), "limit of 1000"),
    "nested_repeat": (_object({"type": "string", "pattern": "^((a*)*)*b$"}), None),
    "nested_arrays": (_object(_nested_arrays(10)), "too expensive"),
    "enum_4000": (_object({"type": "string", "enum": [f"v{i}" for i in range(4000)]}), None),
    "enum_4000_objects": (_object({"enum": [{"k": i} for i in range(4000)]}), None),
    "integer_min_1e400": (_object({"type": "integer", "minimum": 10**400}), "minimum"),
    "number_max_1e400": (_object({"type": "number", "maximum": -(10**400)}), "maximum"),
    "tiny_multiple": (_object({"type": "number", "multipleOf": 1e-310}), "multipleOf"),
    "huge_multiple": (_object({"type": "integer", "multipleOf": 10**400}), "multipleOf"),
    "all_of_type_5": (_object({"allOf": [{"type": "string"}, {"type": 5}]}), "type must be"),
    "all_of_bad_minimum": (
        _object({"allOf": [{"type": "integer", "minimum": 1}, {"minimum": "x"}]}),
        "minimum must be a number",
    ),
    "required_over_limit": (
        {"type": "object", "required": [f"p{i}" for i in range(MAX_PROPERTIES + 1)]},
        f"limit of {MAX_PROPERTIES}",
    ),
    "min_properties_over_limit": (
        {"type": "object", "minProperties": 10**9, "properties": {"a": {"type": "string"}}},
        "minProperties",
    ),
    # Each unsatisfiable branch is tried once, at 5-20 us each (machines vary): 300 of them
    # stay well inside the 30 ms deadline on a slow one, which 1000 did not.
    "any_of_300_unsatisfiable": (
        _object({"anyOf": [UNSATISFIABLE] * 300}),
        "no anyOf branch can be satisfied",
    ),
    "any_of_300_empty_enums": (
        _object({"anyOf": [{"enum": []} for _ in range(300)]}),
        "no anyOf branch can be satisfied",
    ),
    "any_of_299_unsatisfiable_then_one": (
        _object({"anyOf": [*[UNSATISFIABLE] * 299, {"type": "integer"}]}),
        None,
    ),
    # Many more branches than the deadline allows still end at once, in the deadline's words.
    "any_of_10000_unsatisfiable": (
        _object({"anyOf": [UNSATISFIABLE] * 10000}),
        "ms of CPU",
    ),
    # The enum is filtered once per synthesis, not once per item.
    "unique_items_of_enum_4000": (_unique({"type": "string", "enum": ENUM_4000}), None),
    "unique_items_of_untyped_enum_4000": (_unique({"enum": ENUM_4000}, MAX_ITEMS - 1), None),
    "unique_items_of_enum_3": (_unique({"enum": [1, 2, 3]}), "unique items"),
    "unique_items_of_mostly_rejected_enum": (
        _unique({"type": "integer", "enum": [*range(MAX_ITEMS - 1), *ENUM_4000]}),
        "unique items",
    ),
    "unique_objects_of_enum_3": (_unique(_object({"enum": [1, 2, 3]})), "unique items"),
    # Copies of const values count against the value budget.
    "const_items_past_value_budget": (
        _object({"type": "array", "minItems": MAX_ITEMS, "items": {"const": list(range(200))}}),
        f"more than {MAX_NODES} values",
    ),
    "pattern_over_length_limit": (
        _object({"type": "string", "pattern": "a" * 1_000_000}),
        f"limit of {MAX_PATTERN_LENGTH} characters",
    ),
    # Loops over one keyword's values check the deadline.
    # 400,000 values: filtering them takes well past the deadline on any machine (50,000
    # took under 30 ms of CPU on a fast one).
    "enum_400000_filtered": (
        _object({"type": "string", "maxLength": 3, "enum": [f"v{i}" for i in range(400_000)]}),
        "too expensive",
    ),
}


def _outcome(schema: dict[str, Any]) -> Any:
    try:
        return synthesize(random.Random(0), schema, SynthesisSettings())
    except SynthesisError as error:
        return error


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_schema_outcome(name: str) -> None:
    schema, fragment = CASES[name]
    outcome = _outcome(schema)
    if fragment is None:
        assert not isinstance(outcome, SynthesisError), outcome
        jsonschema.validate(outcome, schema)
    else:
        assert isinstance(outcome, SynthesisError), outcome
        assert fragment in str(outcome)
        assert re.search(r" at \$", str(outcome)), outcome  # names the schema path


@pytest.mark.timing
@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_schema_is_fast(name: str) -> None:
    started = time.perf_counter()
    _outcome(CASES[name][0])
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_schema_cpu_time_stays_near_the_deadline(name: str) -> None:
    # The deadline plus what one step between two clock checks may add; CPU time, so a
    # busy machine does not count (a generous margin: each case takes well under it).
    started = time.thread_time()
    _outcome(CASES[name][0])
    assert time.thread_time() - started < DEADLINE_SECONDS + 0.07


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_schema_outcome_is_deterministic(name: str) -> None:
    first, second = _outcome(CASES[name][0]), _outcome(CASES[name][0])
    if isinstance(first, SynthesisError) and "ms of CPU" in str(first):
        # Where the deadline strikes depends on the machine; that it strikes does not.
        assert isinstance(second, SynthesisError) and "ms of CPU" in str(second)
    else:
        assert str(first) == str(second)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_schemas_take_a_fraction_of_the_deadline(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    settings = SynthesisSettings(optional_param_probability=100, optional_field_probability=100)
    spent = []
    for seed in range(20):
        started = time.thread_time()
        synthesize(random.Random(seed), schema, settings)
        spent.append(time.thread_time() - started)
    # The slowest corpus schema takes about 3 ms; a busy machine may double that.
    assert statistics.median(spent) < DEADLINE_SECONDS / 3, max(spent)


def test_errors_name_the_path() -> None:
    outcome = _outcome(_object({"type": "array", "items": True, "minItems": 10**9}))
    assert str(outcome).endswith("at $.properties.x")
    assert f"limit of {MAX_ITEMS} items" in str(outcome)
    outcome = _outcome(_object({"type": "string", "minLength": MAX_STRING_LENGTH + 1}))
    assert str(outcome).endswith("at $.properties.x")


def test_strings_at_the_limits_are_generated() -> None:
    value = _outcome({"type": "string", "minLength": MAX_STRING_LENGTH})
    assert isinstance(value, str) and len(value) >= MAX_STRING_LENGTH
    value = _outcome({"type": "string", "pattern": f"^a{{{MAX_STRING_LENGTH}}}$"})
    assert value == "a" * MAX_STRING_LENGTH
    items = _outcome({"type": "array", "items": {"type": "integer"}, "minItems": MAX_ITEMS})
    assert isinstance(items, list) and len(items) == MAX_ITEMS


def test_value_budget_counts_every_value() -> None:
    # 100 x 100 + 1 values: over the budget even though each array is within the item cap.
    outcome = _outcome(_nested_arrays(2, count=100))
    assert isinstance(outcome, SynthesisError)
    assert f"more than {MAX_NODES} values" in str(outcome) or "too expensive" in str(outcome)


def test_unsatisfiable_any_of_branch_is_never_picked() -> None:
    bad = {"type": "string", "minLength": 5, "maxLength": 2}
    schema = _object({"anyOf": [bad, {"type": "integer"}, False, {"not": {}, "type": 5}]})
    for seed in range(50):
        value = synthesize(random.Random(seed), schema, SynthesisSettings())
        assert isinstance(value["x"], int)


def test_unsatisfiable_one_of_branch_is_never_picked() -> None:
    bad = {"type": "array", "items": False, "minItems": 1}
    schema = _object({"oneOf": [bad, {"type": "boolean"}]})
    for seed in range(50):
        value = synthesize(random.Random(seed), schema, SynthesisSettings())
        assert isinstance(value["x"], bool)


def test_no_satisfiable_branch_is_an_error() -> None:
    bad = {"type": "string", "minLength": 5, "maxLength": 2}
    for key in ("anyOf", "oneOf"):
        outcome = _outcome(_object({key: [bad, bad]}))
        assert isinstance(outcome, SynthesisError)
        assert "$.properties.x" in str(outcome)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("^(a+)+$", "a" * 30),
        ("^(a+)+$", "a" * 34 + "!"),
        (r"\bfoo\b", "a foo b"),
        (r"\bfoo\b", "afoo"),
        ("[^a-c]x", "éx"),
        (".", "\n"),
        (r"^\d{3}-\w+$", "123-ab_c"),
        ("^abc$", "abc\n"),
        ("^(ab|cd)*e?$", "abcdc"),
        ("a{2,4}b", "aaaaab"),
        (r"^\s*$", "\t "),
    ],
)
def test_pattern_search_agrees_with_re(pattern: str, text: str) -> None:
    if len(text) < 30 or "+)+" not in pattern:  # re itself would backtrack for minutes
        assert pattern_search(pattern, text) == (re.search(pattern, text) is not None)
    else:
        assert pattern_search(pattern, text) is ("!" not in text)


def test_pattern_search_is_linear_on_catastrophic_patterns() -> None:
    started = time.perf_counter()
    assert not pattern_search("^(a|a)*(a*)*b$", "a" * 1000)
    assert time.perf_counter() - started < 5.0  # re.search would not finish (generous bound)
