"""Unit tests of vllm_sim.protocols.common.tools: tools, tool_choice and response_format parsing."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from vllm_sim.errors import RequestError
from vllm_sim.protocols.common.tools import (
    ResponseFormat,
    ResponseFormatKind,
    Tool,
    ToolChoice,
    ToolChoiceMode,
    parse_response_format,
    parse_tool_choice,
    parse_tools,
    tool_candidates,
)

VALIDATION = "Tool validation failed: tool 'get_weather': "
PARAMS = "tools[0].function.parameters"
X = f"{PARAMS}.properties.x"


def chat_tool(parameters: Any = ..., name: str = "get_weather", **extra: Any) -> dict[str, Any]:
    """A chat-form tool; `...` leaves `parameters` out."""
    function: dict[str, Any] = {"name": name, "description": "Get the weather", **extra}
    if parameters is not ...:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def with_x(schema: Any) -> dict[str, Any]:
    """Parameters whose single property `x` has the given schema."""
    return {"type": "object", "properties": {"x": schema}}


def error_of(call: Any, *args: Any) -> RequestError:
    with pytest.raises(RequestError) as caught:
        call(*args)
    return caught.value


def assert_error(error: RequestError, param: str, message: str, *, exact: bool = True) -> None:
    assert error.status == 400
    assert error.error_type == "BadRequestError"
    assert error.param == param
    if exact:
        assert error.message == message
    else:
        assert error.message.startswith(message), error.message


def validation_error(parameters: Any) -> RequestError:
    return error_of(parse_tools, [chat_tool(parameters)], False)


WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City, e.g. Boston"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["location"],
    "additionalProperties": False,
}


# ---------------------------------------------------------------- parse_tools: shapes


def test_absent_or_null_tools_is_none() -> None:
    assert parse_tools(None, False) is None
    assert parse_tools(msgspec.UNSET, False) is None


def test_empty_tools_is_an_empty_list() -> None:
    assert parse_tools([], False) == []


def test_chat_form_is_parsed() -> None:
    tools = parse_tools([chat_tool(WEATHER)], False)
    assert tools == [Tool("get_weather", "Get the weather", WEATHER)]


def test_flat_responses_form_is_parsed() -> None:
    raw = {"type": "function", "name": "f", "description": "d", "parameters": WEATHER}
    assert parse_tools([raw], False) == [Tool("f", "d", WEATHER)]


def test_extra_keys_and_item_type_are_ignored() -> None:
    raw = chat_tool(WEATHER, strict=True, whatever=[1])
    raw["type"] = "not-checked"
    raw["extra"] = {"a": 1}
    assert parse_tools([raw], False) == [Tool("get_weather", "Get the weather", WEATHER)]


@pytest.mark.parametrize("description", [..., None])
def test_missing_or_null_description_is_empty(description: Any) -> None:
    function: dict[str, Any] = {"name": "f", "parameters": WEATHER}
    if description is not ...:
        function["description"] = description
    [tool] = parse_tools([{"type": "function", "function": function}], False) or []
    assert tool.description == ""


def test_several_tools_keep_their_order() -> None:
    raw = [chat_tool(WEATHER, name="a"), chat_tool(WEATHER, name="b"), chat_tool(WEATHER, "a")]
    assert [tool.name for tool in parse_tools(raw, False) or []] == ["a", "b", "a"]


# ---------------------------------------------------------- parse_tools: structural errors


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize(
    ("raw", "param", "message"),
    [
        ("x", "tools", "tools must be an array of tool objects, got string"),
        ({"type": "function"}, "tools", "tools must be an array of tool objects, got object"),
        (1, "tools", "tools must be an array of tool objects, got integer"),
        (["f"], "tools[0]", "tools[0] must be an object like"),
        ([None], "tools[0]", "tools[0] must be an object like"),
        ([[]], "tools[0]", "tools[0] must be an object like"),
        (
            [{"type": "function", "function": "f"}],
            "tools[0].function",
            "tools[0].function must be an object, got string",
        ),
        (
            [{"type": "function", "function": ["f"]}],
            "tools[0].function",
            "tools[0].function must be an object, got array",
        ),
        (
            [{"type": "function", "function": {"parameters": WEATHER}}],
            "tools[0].function.name",
            "tools[0].function.name is required",
        ),
        (
            [{"type": "function", "function": {"name": None}}],
            "tools[0].function.name",
            "tools[0].function.name is required",
        ),
        (
            [{"type": "function", "function": {"name": ""}}],
            "tools[0].function.name",
            "tools[0].function.name must not be empty",
        ),
        (
            [{"type": "function", "function": {"name": 5}}],
            "tools[0].function.name",
            "tools[0].function.name must be a string, got integer",
        ),
        (
            [{"type": "function", "parameters": WEATHER}],
            "tools[0].name",
            "tools[0].name is required",
        ),
        (
            [{"type": "function", "function": None, "name": ["f"]}],
            "tools[0].name",
            "tools[0].name must be a string, got array",
        ),
        (
            [{"type": "function", "function": {"name": "f", "description": 5}}],
            "tools[0].function.description",
            "tools[0].function.description must be a string, got integer",
        ),
        (
            [{"type": "function", "function": {"name": "f", "parameters": "{}"}}],
            "tools[0].function.parameters",
            "tools[0].function.parameters must be an object (a JSON Schema), got string",
        ),
        (
            [{"type": "function", "function": {"name": "f", "parameters": []}}],
            "tools[0].function.parameters",
            "tools[0].function.parameters must be an object (a JSON Schema), got array",
        ),
        (
            [{"type": "function", "name": "f", "parameters": 5}],
            "tools[0].parameters",
            "tools[0].parameters must be an object (a JSON Schema), got integer",
        ),
    ],
)
def test_structural_problems_are_400_even_when_skipping_validation(
    raw: Any, param: str, message: str, skip: bool
) -> None:
    assert_error(error_of(parse_tools, raw, skip), param, message, exact=False)


def test_structural_error_names_the_item_index() -> None:
    raw = [chat_tool(WEATHER), chat_tool(WEATHER), {"function": {"name": ""}}]
    assert_error(
        error_of(parse_tools, raw, False),
        "tools[2].function.name",
        "tools[2].function.name must not be empty",
    )


def test_structural_errors_come_before_any_schema_validation() -> None:
    # The reference decodes the whole body before it validates the first tool.
    raw = [chat_tool({"$ref": "#/x"}), {"function": {"name": 1}}]
    assert_error(
        error_of(parse_tools, raw, False),
        "tools[1].function.name",
        "tools[1].function.name must be a string, got integer",
    )


# ------------------------------------------------------------ whitelist: accepted schemas


@pytest.mark.parametrize(
    "parameters",
    [
        WEATHER,
        {"type": "object", "properties": {}},
        {"type": "string"},  # parameters need not be an object schema
        with_x({"type": "string"}),
        with_x({"type": "number"}),
        with_x({"type": "integer"}),
        with_x({"type": "boolean"}),
        with_x({"type": "null"}),
        with_x({"type": "object", "properties": {"y": {"type": "string"}}}),
        with_x({"type": "array", "items": {"type": "string"}}),
        with_x({"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}),
        with_x({"type": "array", "items": []}),
        with_x({"type": "string", "description": "d", "pattern": "^a$", "format": "date"}),
        with_x({"type": "string", "title": "T"}),
        with_x({"type": "string", "enum": ["a", "b"]}),
        with_x({"type": "string", "enum": []}),
        with_x({"type": "number", "enum": [1, 2.5, -3]}),
        with_x({"type": "integer", "enum": [1, -2, 3.0]}),
        with_x({"type": "boolean", "enum": [True, False]}),
        {"type": "object", "properties": {}, "required": []},
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]},
        {"type": "object", "properties": {}, "additionalProperties": True},
        {"type": "object", "properties": {}, "additionalProperties": False},
        with_x({"type": "array", "items": {"type": "string"}, "minItems": 0, "maxItems": 5}),
        with_x({"type": "array", "items": {"type": "string"}, "minItems": 2.0}),
        with_x({"type": "string", "minLength": 0, "maxLength": 10}),
        with_x({"type": "number", "minimum": -1.5, "maximum": 10}),
        with_x({"type": "integer", "minimum": 0, "maximum": 0}),
        with_x({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 9.5}),
        with_x({"type": "number", "exclusiveMinimum": True, "exclusiveMaximum": False}),
        with_x({"type": "string", "default": "a"}),
        with_x({"type": "object", "properties": {}, "default": {"any": [None, 1]}}),
        with_x({"type": "string", "default": None}),
        {"type": "object", "properties": {"weird key.$x": {"type": "string"}}},
        {
            "type": "object",
            "properties": {
                "list": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"deep": {"type": "array", "items": {"type": "boolean"}}},
                        "required": ["deep"],
                    },
                }
            },
        },
    ],
)
def test_whitelisted_schemas_are_accepted(parameters: Any) -> None:
    [tool] = parse_tools([chat_tool(parameters)], False) or []
    assert tool.parameters == parameters


def test_a_very_deep_schema_is_checked_without_recursion_error() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    assert parse_tools([chat_tool(schema)], False) is not None
    schema = {"type": "array", "items": {"type": "string", "$ref": "#"}}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    error = validation_error(schema)
    assert_error(error, "tools", VALIDATION + PARAMS + ".items", exact=False)
    assert 'keyword "$ref" is not allowed' in error.message


# ------------------------------------------------------------ whitelist: rejected schemas


def test_missing_parameters_is_rejected() -> None:
    assert_error(
        validation_error(...),
        "tools",
        VALIDATION + PARAMS + ': is required (a JSON Schema such as {"type": "object", ...})',
    )


def test_null_parameters_is_rejected_like_missing() -> None:
    assert_error(
        validation_error(None), "tools", VALIDATION + PARAMS + ": is required", exact=False
    )


def test_empty_parameters_is_rejected() -> None:
    assert_error(
        validation_error({}),
        "tools",
        VALIDATION + PARAMS + ': must not be empty: it needs at least a "type"',
    )


@pytest.mark.parametrize(
    "keyword",
    [
        "$schema",
        "$ref",
        "$defs",
        "$comment",
        "anyOf",
        "oneOf",
        "allOf",
        "const",
        "nullable",
        "examples",
        "not",
        "uniqueItems",
        "multipleOf",
        "Type",  # keywords are case-sensitive
    ],
)
def test_each_forbidden_keyword_is_rejected_at_top_level_and_nested(keyword: str) -> None:
    top = validation_error({"type": "object", "properties": {}, keyword: "v"})
    assert_error(
        top, "tools", f'{VALIDATION}{PARAMS}: keyword "{keyword}" is not allowed', exact=False
    )
    assert "(allowed: type, description, pattern" in top.message
    nested = validation_error(with_x({"type": "string", keyword: "v"}))
    assert_error(
        nested, "tools", f'{VALIDATION}{X}: keyword "{keyword}" is not allowed', exact=False
    )


def test_forbidden_keyword_is_checked_before_a_missing_type() -> None:
    error = validation_error(with_x({"type": "array", "items": {"anyOf": []}}))
    assert_error(error, "tools", f'{VALIDATION}{X}.items: keyword "anyOf"', exact=False)


@pytest.mark.parametrize(
    ("schema", "path", "rule"),
    [
        # type
        ({"description": "d"}, X, '"type" is required (one of object, array, string, number'),
        (
            {"type": ["string", "null"]},
            f"{X}.type",
            'must be a single type name, not an array (["string","null"])',
        ),
        (
            {"type": "float"},
            f"{X}.type",
            'must be one of object, array, string, number, integer, boolean, null, got "float"',
        ),
        ({"type": 5}, f"{X}.type", "must be one of object, array"),
        ({"type": None}, f"{X}.type", "must be one of object, array"),
        # string keywords
        ({"type": "string", "description": 1}, f"{X}.description", "must be a string, got integer"),
        ({"type": "string", "pattern": None}, f"{X}.pattern", "must be a string, got null"),
        ({"type": "string", "format": ["date"]}, f"{X}.format", "must be a string, got array"),
        ({"type": "string", "title": True}, f"{X}.title", "must be a string, got boolean"),
        # enum
        (
            {"type": "object", "properties": {}, "enum": []},
            f"{X}.enum",
            'is not allowed for type "object"',
        ),
        (
            {"type": "array", "items": {"type": "string"}, "enum": [[1]]},
            f"{X}.enum",
            'is not allowed for type "array"',
        ),
        ({"type": "null", "enum": [None]}, f"{X}.enum", 'is not allowed for type "null"'),
        ({"type": "string", "enum": "a"}, f"{X}.enum", "must be an array, got string"),
        (
            {"type": "string", "enum": ["a", 1]},
            f"{X}.enum[1]",
            '1 does not match the schema type "string"',
        ),
        (
            {"type": "string", "enum": [None]},
            f"{X}.enum[0]",
            'null does not match the schema type "string"',
        ),
        (
            {"type": "integer", "enum": [1, 1.5]},
            f"{X}.enum[1]",
            '1.5 does not match the schema type "integer"',
        ),
        (
            {"type": "integer", "enum": ["1"]},
            f"{X}.enum[0]",
            '"1" does not match the schema type "integer"',
        ),
        (
            {"type": "integer", "enum": [True]},
            f"{X}.enum[0]",
            'true does not match the schema type "integer"',
        ),
        (
            {"type": "number", "enum": ["1.5"]},
            f"{X}.enum[0]",
            '"1.5" does not match the schema type "number"',
        ),
        (
            {"type": "number", "enum": [False]},
            f"{X}.enum[0]",
            'false does not match the schema type "number"',
        ),
        (
            {"type": "boolean", "enum": [0]},
            f"{X}.enum[0]",
            '0 does not match the schema type "boolean"',
        ),
        (
            {"type": "boolean", "enum": [{"a": 1}]},
            f"{X}.enum[0]",
            '{"a":1} does not match the schema type "boolean"',
        ),
        # array / object requirements
        ({"type": "array"}, X, 'a schema of type "array" needs "items"'),
        ({"type": "object"}, X, 'a schema of type "object" needs "properties"'),
        (
            {"type": "object", "properties": []},
            f"{X}.properties",
            "must be an object mapping names to schemas, got array",
        ),
        (
            {"type": "object", "properties": {"y": True}},
            f"{X}.properties.y",
            "a schema must be an object, got boolean",
        ),
        ({"type": "object", "properties": {"y": {}}}, f"{X}.properties.y", '"type" is required'),
        (
            {"type": "object", "properties": {"a b": {"type": "str"}}},
            f'{X}.properties["a b"].type',
            "must be one of",
        ),
        (
            {"type": "array", "items": True},
            f"{X}.items",
            "must be a schema or an array of schemas, got boolean",
        ),
        (
            {"type": "array", "items": [{"type": "string"}, {"type": "array"}]},
            f"{X}.items[1]",
            'a schema of type "array" needs "items"',
        ),
        (
            {"type": "array", "items": {"type": "object", "properties": {"z": {"const": 1}}}},
            f"{X}.items.properties.z",
            'keyword "const" is not allowed',
        ),
        # additionalProperties
        (
            {"type": "object", "properties": {}, "additionalProperties": {}},
            f"{X}.additionalProperties",
            "must be a boolean (schemas are not supported here), got object",
        ),
        (
            {"type": "object", "properties": {}, "additionalProperties": "no"},
            f"{X}.additionalProperties",
            "must be a boolean",
        ),
        # required
        (
            {"type": "object", "properties": {}, "required": "a"},
            f"{X}.required",
            "must be an array of strings, got string",
        ),
        (
            {"type": "object", "properties": {}, "required": ["a", 1]},
            f"{X}.required[1]",
            "must be a string, got integer",
        ),
        # counts
        (
            {"type": "array", "items": {"type": "string"}, "minItems": -1},
            f"{X}.minItems",
            "must be an integer >= 0, got -1",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "maxItems": 1.5},
            f"{X}.maxItems",
            "must be an integer >= 0, got 1.5",
        ),
        (
            {"type": "string", "minLength": "1"},
            f"{X}.minLength",
            'must be an integer >= 0, got "1"',
        ),
        (
            {"type": "string", "maxLength": True},
            f"{X}.maxLength",
            "must be an integer >= 0, got true",
        ),
        ({"type": "string", "maxLength": -2.0}, f"{X}.maxLength", "must be an integer >= 0"),
        # bounds
        ({"type": "number", "minimum": "0"}, f"{X}.minimum", "must be a number, got string"),
        ({"type": "number", "maximum": True}, f"{X}.maximum", "must be a number, got boolean"),
        ({"type": "number", "minimum": None}, f"{X}.minimum", "must be a number, got null"),
        (
            {"type": "number", "exclusiveMinimum": "1"},
            f"{X}.exclusiveMinimum",
            "must be a number or a boolean, got string",
        ),
        (
            {"type": "number", "exclusiveMaximum": None},
            f"{X}.exclusiveMaximum",
            "must be a number or a boolean, got null",
        ),
    ],
)
def test_whitelist_violations_are_rejected(schema: Any, path: str, rule: str) -> None:
    assert_error(
        validation_error(with_x(schema)), "tools", f"{VALIDATION}{path}: {rule}", exact=False
    )


@pytest.mark.parametrize(
    ("parameters", "rule"),
    [
        ({"type": ["object", "null"], "properties": {}}, ".type: must be a single type name"),
        ({"type": "object"}, ': a schema of type "object" needs "properties"'),
        ({"properties": {}}, ': "type" is required'),
        (
            {"type": "object", "properties": {}, "$schema": "x"},
            ': keyword "$schema" is not allowed',
        ),
    ],
)
def test_top_level_parameters_follow_the_same_rules(parameters: Any, rule: str) -> None:
    assert_error(validation_error(parameters), "tools", VALIDATION + PARAMS + rule, exact=False)


def test_flat_form_errors_use_the_flat_path() -> None:
    raw = [{"type": "function", "name": "f", "parameters": {"type": "array"}}]
    assert_error(
        error_of(parse_tools, raw, False),
        "tools",
        "Tool validation failed: tool 'f': tools[0].parameters: "
        'a schema of type "array" needs "items"',
    )


def test_the_first_failing_tool_is_reported() -> None:
    raw = [
        chat_tool(WEATHER, name="ok"),
        chat_tool(with_x({"type": "string", "oneOf": []}), name="bad1"),
        chat_tool({}, name="bad2"),
    ]
    assert_error(
        error_of(parse_tools, raw, False),
        "tools",
        "Tool validation failed: tool 'bad1': tools[1].function.parameters.properties.x: "
        'keyword "oneOf" is not allowed',
        exact=False,
    )


def test_the_first_violation_in_document_order_is_reported() -> None:
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "string", "const": "x"}, "b": {"type": "nope"}},
    }
    assert_error(
        validation_error(parameters),
        "tools",
        f'{VALIDATION}{PARAMS}.properties.a: keyword "const"',
        exact=False,
    )


@pytest.mark.parametrize(
    "parameters",
    [
        ...,
        None,
        {},
        {"type": "object", "properties": {}, "$ref": "#/$defs/x"},
        with_x({"type": ["string", "null"]}),
        with_x({"anyOf": [{"type": "string"}]}),
        with_x({"type": "array"}),
        with_x({"type": "object", "enum": [1]}),
    ],
)
def test_skip_validation_lets_schema_problems_through(parameters: Any) -> None:
    [tool] = parse_tools([chat_tool(parameters)], True) or []
    expected = {} if parameters is ... or parameters is None else parameters
    assert tool == Tool("get_weather", "Get the weather", expected)


# ----------------------------------------------------------------------- parse_tool_choice


def test_absent_tool_choice_is_auto() -> None:
    assert parse_tool_choice() == ToolChoice("auto")
    assert parse_tool_choice(msgspec.UNSET) == ToolChoice("auto")


def test_absent_is_signalled_by_a_msgspec_unset_field() -> None:
    # How a caller keeps absent and null apart when decoding the body.
    class Body(msgspec.Struct):
        tool_choice: Any | msgspec.UnsetType = msgspec.UNSET

    decoder = msgspec.json.Decoder(Body)
    assert parse_tool_choice(decoder.decode(b"{}").tool_choice) == ToolChoice("auto")
    error = error_of(parse_tool_choice, decoder.decode(b'{"tool_choice": null}').tool_choice)
    assert_error(error, "tool_choice", "unknown ToolChoice type: null", exact=False)


@pytest.mark.parametrize(
    ("raw", "mode"),
    [
        ("none", "none"),
        ("required", "required"),
        ("auto", "auto"),
        ("", "auto"),
        ("x", "auto"),
        ("None", "auto"),  # only the exact strings are special
        ("REQUIRED", "auto"),
    ],
)
def test_string_tool_choice(raw: str, mode: ToolChoiceMode) -> None:
    assert parse_tool_choice(raw) == ToolChoice(mode)


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ({"type": "function", "function": {"name": "get_weather"}}, "get_weather"),
        ({"type": "function", "name": "flat"}, "flat"),
        ({"type": "function", "function": {"name": "nested"}, "name": "flat"}, "nested"),
        ({"type": "function", "function": {"name": ""}, "name": "flat"}, "flat"),
        ({"type": "function", "function": {}, "name": "flat"}, "flat"),
        ({"type": "function", "function": None, "name": "flat"}, "flat"),
        ({"type": "function", "function": {"name": "f", "extra": 1}, "strict": True}, "f"),
    ],
)
def test_function_tool_choice_names_a_tool(raw: dict[str, Any], name: str) -> None:
    assert parse_tool_choice(raw) == ToolChoice("named", name)


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "function"},
        {"type": "function", "function": {}},
        {"type": "function", "function": None},
        {"type": "function", "function": {"name": ""}},
        {"type": "function", "function": {"name": None}, "name": ""},
    ],
)
def test_function_tool_choice_without_a_name_is_400(raw: dict[str, Any]) -> None:
    assert_error(
        error_of(parse_tool_choice, raw), "tool_choice", "tool_choice function requires a name"
    )


@pytest.mark.parametrize(
    ("raw", "param", "message"),
    [
        (
            {"type": "function", "function": {"name": 5}},
            "tool_choice.function.name",
            "tool_choice.function.name must be a string, got integer",
        ),
        (
            {"type": "function", "name": ["f"]},
            "tool_choice.name",
            "tool_choice.name must be a string, got array",
        ),
        (
            {"type": "function", "function": "f"},
            "tool_choice.function",
            "tool_choice.function must be an object, got string",
        ),
    ],
)
def test_function_tool_choice_with_a_bad_shape_is_400(
    raw: dict[str, Any], param: str, message: str
) -> None:
    assert_error(error_of(parse_tool_choice, raw), param, message)


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "custom", "custom": {"name": "x"}},
        {"type": "custom"},
        {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}},
    ],
)
def test_custom_and_allowed_tools_are_accepted_as_auto(raw: dict[str, Any]) -> None:
    assert parse_tool_choice(raw) == ToolChoice("auto")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ({"type": "foo"}, "foo"),
        ({"type": "Function", "function": {"name": "f"}}, "Function"),
        ({"type": ""}, ""),
        ({}, '(missing "type")'),
        ({"function": {"name": "f"}}, '(missing "type")'),
        ({"type": None}, "null"),
        ({"type": 5}, "5"),
    ],
)
def test_unknown_tool_choice_object_type_is_400(raw: dict[str, Any], shown: str) -> None:
    assert_error(
        error_of(parse_tool_choice, raw),
        "tool_choice.type",
        f'unknown ToolChoice type: {shown}; expected "function", "custom" or "allowed_tools"',
    )


@pytest.mark.parametrize(
    ("raw", "kind"), [(None, "null"), (5, "integer"), (True, "boolean"), (["auto"], "array")]
)
def test_null_and_other_json_types_are_unknown_tool_choice_types(raw: object, kind: str) -> None:
    assert_error(
        error_of(parse_tool_choice, raw),
        "tool_choice",
        f'unknown ToolChoice type: {kind}; tool_choice must be "none", "auto", "required" '
        'or an object with a "type"',
    )


@pytest.mark.parametrize(("mode", "name"), [("bogus", None), ("named", None), ("auto", "f")])
def test_tool_choice_rejects_inconsistent_values(mode: str, name: str | None) -> None:
    with pytest.raises(ValueError):
        ToolChoice(mode, name)  # type: ignore[arg-type]  # run-time guard of a bad mode


# ------------------------------------------------------------------------- tool_candidates

A = Tool("a", "", {"type": "object", "properties": {}})
B = Tool("b", "", {"type": "object", "properties": {}})
A2 = Tool("a", "second a", {"type": "object", "properties": {}})


@pytest.mark.parametrize("tools", [None, [], [A, B]])
def test_none_choice_has_no_candidates(tools: list[Tool] | None) -> None:
    assert tool_candidates(tools, ToolChoice("none")) == []


@pytest.mark.parametrize(("tools", "expected"), [(None, []), ([], []), ([A, B], [A, B])])
def test_auto_choice_may_use_every_tool(tools: list[Tool] | None, expected: list[Tool]) -> None:
    assert tool_candidates(tools, ToolChoice("auto")) == expected


def test_required_choice_may_use_every_tool() -> None:
    tools = [A, B]
    candidates = tool_candidates(tools, ToolChoice("required"))
    assert candidates == [A, B]
    assert candidates is not tools  # the caller may not mutate the request's list through it


@pytest.mark.parametrize("tools", [None, []])
def test_required_choice_without_tools_is_400(tools: list[Tool] | None) -> None:
    assert_error(
        error_of(tool_candidates, tools, ToolChoice("required")),
        "tool_choice",
        'tool_choice "required" needs at least one tool in tools: '
        "no tools available to create tool calls",
    )


def test_named_choice_uses_only_that_tool() -> None:
    assert tool_candidates([A, B], ToolChoice("named", "b")) == [B]


def test_named_choice_takes_the_first_of_duplicate_names() -> None:
    assert tool_candidates([B, A, A2], ToolChoice("named", "a")) == [A]


@pytest.mark.parametrize("tools", [None, [], [A, B]])
def test_named_choice_missing_from_tools_is_400(tools: list[Tool] | None) -> None:
    assert_error(
        error_of(tool_candidates, tools, ToolChoice("named", "c")),
        "tool_choice",
        "tool with name 'c' requested in tool_choice but not found in the tools list",
    )


def test_named_choice_is_case_sensitive() -> None:
    error = error_of(tool_candidates, [A], ToolChoice("named", "A"))
    assert_error(error, "tool_choice", "tool with name 'A' requested in tool_choice", exact=False)


def test_parsed_request_end_to_end() -> None:
    tools = parse_tools([chat_tool(WEATHER), chat_tool(WEATHER, name="other")], False)
    choice = parse_tool_choice({"type": "function", "function": {"name": "other"}})
    assert [tool.name for tool in tool_candidates(tools, choice)] == ["other"]


# ------------------------------------------------------------------- parse_response_format

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


def test_absent_or_null_response_format_is_none() -> None:
    assert parse_response_format(None) is None
    assert parse_response_format(msgspec.UNSET) is None


@pytest.mark.parametrize("kind", ["text", "json_object"])
def test_plain_response_formats(kind: ResponseFormatKind) -> None:
    assert parse_response_format({"type": kind}) == ResponseFormat(kind)
    assert parse_response_format({"type": kind, "extra": 1}) == ResponseFormat(kind)


@pytest.mark.parametrize(
    "json_schema",
    [
        {"name": "answer", "schema": SCHEMA, "strict": True},
        {"name": "answer", "schema": SCHEMA},
        {"name": "answer", "schema": SCHEMA, "strict": None, "description": "d"},
    ],
)
def test_json_schema_response_format(json_schema: dict[str, Any]) -> None:
    raw = {"type": "json_schema", "json_schema": json_schema}
    assert parse_response_format(raw) == ResponseFormat("json_schema", SCHEMA, "answer")


def test_json_schema_name_is_optional() -> None:
    raw = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    assert parse_response_format(raw) == ResponseFormat("json_schema", SCHEMA, None)


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
        {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"},
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        {"type": ["string", "null"], "const": "x"},
        {"type": "object"},
    ],
)
def test_response_format_schema_is_not_whitelisted(schema: dict[str, Any]) -> None:
    raw = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    parsed = parse_response_format(raw)
    assert parsed is not None
    assert parsed.schema == schema


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("json", "response_format must be an object, got string"),
        (["text"], "response_format must be an object, got array"),
        ({}, 'response_format.type is required: one of "text", "json_object", "json_schema"'),
        ({"type": None}, "response_format.type is required"),
        (
            {"type": "xml"},
            'unknown response_format type: xml; expected one of "text", "json_object", '
            '"json_schema"',
        ),
        ({"type": "structural_tag"}, "unknown response_format type: structural_tag"),
        ({"type": 1}, "unknown response_format type: 1"),
        (
            {"type": "json_schema"},
            'response_format.json_schema is required when type is "json_schema"',
        ),
        (
            {"type": "json_schema", "json_schema": None},
            'response_format.json_schema is required when type is "json_schema"',
        ),
        (
            {"type": "json_schema", "json_schema": "s"},
            "response_format.json_schema must be an object, got string",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "n"}},
            'response_format.json_schema.schema is required when type is "json_schema"',
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "n", "schema": None}},
            'response_format.json_schema.schema is required when type is "json_schema"',
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "n", "schema": "{}"}},
            "response_format.json_schema.schema must be an object (a JSON Schema), got string",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "n", "schema": [SCHEMA]}},
            "response_format.json_schema.schema must be an object (a JSON Schema), got array",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "n", "schema": True}},
            "response_format.json_schema.schema must be an object (a JSON Schema), got boolean",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": 3, "schema": SCHEMA}},
            "response_format.json_schema.name must be a string, got integer",
        ),
        (
            {"type": "json_schema", "json_schema": {"schema": SCHEMA, "strict": "yes"}},
            "response_format.json_schema.strict must be a boolean, got string",
        ),
    ],
)
def test_bad_response_format_is_400(raw: object, message: str) -> None:
    assert_error(error_of(parse_response_format, raw), "response_format", message, exact=False)
