"""Parse and validate a chat request's `tools`, `tool_choice` and `response_format`.

The request decoder hands these over as plain JSON values (dicts, lists, scalars), so every
shape check lives here. Tool schemas must pass the reference's keyword whitelist (a tool
server built against it accepts nothing else). Where the reference answers 500 for a client
mistake (an empty or unmatched tools list), this module answers 400, and every error names
the offending field in `param`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn, get_args

import msgspec

from vllm_sim.engine.generation.toolcalls import ToolPlan
from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import json_kind
from vllm_sim.schemagen import SynthesisError, SynthesisSettings, budgeted, synthesize

__all__ = [
    "ResponseFormat",
    "Tool",
    "ToolChoice",
    "parse_response_format",
    "parse_tool_choice",
    "parse_tools",
    "tool_candidates",
]

# ------------------------------------------------------------------------------------ types

# No calls, maybe calls, at least one call, or one named tool.
ToolChoiceMode = Literal["none", "auto", "required", "named"]
ResponseFormatKind = Literal["text", "json_object", "json_schema"]
_TOOL_CHOICE_MODES: Final = frozenset(get_args(ToolChoiceMode))
_RESPONSE_FORMAT_KINDS: Final = get_args(ResponseFormatKind)


@dataclass(frozen=True, slots=True)
class Tool:
    """One function a tool call may name."""

    name: str
    description: str
    parameters: Mapping[str, Any]  # the JSON Schema of the arguments


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """What `tool_choice` asks for: no calls, maybe calls, at least one call, or one tool."""

    mode: ToolChoiceMode
    name: str | None = None  # for "named"

    def __post_init__(self) -> None:
        # Guards hand-built values: tool_candidates trusts mode and name to agree.
        if self.mode not in _TOOL_CHOICE_MODES:
            raise ValueError(f"unknown tool choice mode {self.mode!r}")
        if (self.mode == "named") != (self.name is not None):
            raise ValueError("a tool choice has a name exactly when its mode is 'named'")


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """The requested output format; `schema` and `name` are set for "json_schema" only."""

    kind: ResponseFormatKind
    schema: Mapping[str, Any] | None = None
    name: str | None = None


# ------------------------------------------------------------------------- small helpers


def _show(value: object, limit: int = 60) -> str:
    """A value as compact JSON, shortened so a huge payload cannot bloat the error body."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    # JSON Schema 2020-12 counts 2.0 as an integer; the decoder hands it over as a float.
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _child(path: str, key: str) -> str:
    """`path.key`, or `path["key"]` when the key would make the dotted form ambiguous."""
    if _IDENTIFIER.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


# --------------------------------------------------------------------------------- tools


def parse_tools(raw: object, skip_validation: bool) -> list[Tool] | None:
    """The request's tools, or None when `tools` is absent or null.

    Accepts the chat form `{"type": "function", "function": {"name", "description",
    "parameters", ...}}` and the flat Responses-API form `{"type": "function", "name",
    "parameters", ...}`; the item `type` and extra keys (e.g. `strict`) are ignored.

    Structural problems (not an array, an item or `function` not an object, a missing, empty or
    non-string name, a non-string description, non-object parameters) are 400 with the exact
    path in `param`, even with `skip_validation`: nothing downstream could use such a tool.
    Otherwise, unless `skip_validation`, every tool's parameters must pass the whitelist;
    the first failure is 400 `Tool validation failed: tool '<name>': <path>: <rule>`, param
    `tools`. All tools are parsed before any is validated, as the reference decodes the whole
    body before it validates.
    """
    if raw is None or raw is msgspec.UNSET:
        return None
    if not isinstance(raw, list):
        raise RequestError(
            400, f"tools must be an array of tool objects, got {json_kind(raw)}", param="tools"
        )
    parsed = [_parse_tool(item, f"tools[{index}]") for index, item in enumerate(raw)]
    if not skip_validation:
        for tool, params_path, raw_parameters in parsed:
            _validate_tool(tool, params_path, raw_parameters)
    return [tool for tool, _, _ in parsed]


def _parse_tool(item: object, path: str) -> tuple[Tool, str, object]:
    """One tool, its parameters' path and its raw parameters (None when absent or null)."""
    if not isinstance(item, dict):
        raise RequestError(
            400,
            f'{path} must be an object like {{"type": "function", "function": {{"name": ...}}}}, '
            f"got {json_kind(item)}",
            param=path,
        )
    function = item.get("function")
    if function is None:
        # No nested function object: the flat Responses-API form keeps its keys on the item.
        fields: dict[str, Any] = item
    elif isinstance(function, dict):
        fields, path = function, f"{path}.function"
    else:
        raise RequestError(
            400, f"{path}.function must be an object, got {json_kind(function)}", f"{path}.function"
        )
    name = fields.get("name")
    if name is None:
        raise RequestError(400, f"{path}.name is required", param=f"{path}.name")
    if not isinstance(name, str):
        raise RequestError(
            400, f"{path}.name must be a string, got {json_kind(name)}", param=f"{path}.name"
        )
    if not name:
        raise RequestError(400, f"{path}.name must not be empty", param=f"{path}.name")
    description = fields.get("description")
    if description is None:
        description = ""  # the reference always treats the description as present
    elif not isinstance(description, str):
        raise RequestError(
            400,
            f"{path}.description must be a string, got {json_kind(description)}",
            param=f"{path}.description",
        )
    parameters = fields.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise RequestError(
            400,
            f"{path}.parameters must be an object (a JSON Schema), got {json_kind(parameters)}",
            param=f"{path}.parameters",
        )
    # Absent parameters become {} so that, with validation skipped, generation sees no
    # properties instead of tripping over None.
    tool = Tool(name=name, description=description, parameters=parameters or {})
    return tool, f"{path}.parameters", parameters


def _validate_tool(tool: Tool, params_path: str, raw_parameters: object) -> None:
    try:
        if raw_parameters is None:
            raise _SchemaError(
                params_path, 'is required (a JSON Schema such as {"type": "object", ...})'
            )
        if raw_parameters == {}:
            raise _SchemaError(params_path, 'must not be empty: it needs at least a "type"')
        _validate_schema(raw_parameters, params_path)
    except _SchemaError as error:
        raise RequestError(
            400,
            f"Tool validation failed: tool '{tool.name}': {error.path}: {error.rule}",
            param="tools",
        ) from None


# ------------------------------------------------------------ the schema keyword whitelist

_SCHEMA_TYPES: Final = ("object", "array", "string", "number", "integer", "boolean", "null")
_ALLOWED_KEYWORDS: Final = (
    "type",
    "description",
    "pattern",
    "format",
    "title",
    "enum",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "default",
)
_ALLOWED_SET: Final = frozenset(_ALLOWED_KEYWORDS)
_STRING_KEYWORDS: Final = ("description", "pattern", "format", "title")
_COUNT_KEYWORDS: Final = ("minItems", "maxItems", "minLength", "maxLength")
_NO_ENUM_TYPES: Final = frozenset({"object", "array", "null"})


class _SchemaError(Exception):
    """A whitelist violation at a path inside one tool."""

    def __init__(self, path: str, rule: str) -> None:
        super().__init__(f"{path}: {rule}")
        self.path = path
        self.rule = rule


def _validate_schema(root: object, path: str) -> None:
    """Raises _SchemaError for the first violation, depth-first in document order.

    An explicit stack instead of recursion: a hostile, deeply nested schema must not turn
    into a RecursionError (a 500) instead of an answer.
    """
    stack: list[tuple[str, object]] = [(path, root)]
    while stack:
        where, schema = stack.pop()
        children = _check_schema(schema, where)
        stack.extend(reversed(children))


def _check_schema(schema: object, path: str) -> list[tuple[str, object]]:
    """Checks one schema node's own keywords; returns its sub-schemas to check next."""
    if not isinstance(schema, dict):
        raise _SchemaError(path, f"a schema must be an object, got {json_kind(schema)}")
    for key in schema:
        if key not in _ALLOWED_SET:
            raise _SchemaError(
                path,
                f'keyword "{key}" is not allowed (allowed: {", ".join(_ALLOWED_KEYWORDS)})',
            )
    schema_type = _check_type(schema, path)
    for key in _STRING_KEYWORDS:
        if key in schema and not isinstance(schema[key], str):
            raise _SchemaError(_child(path, key), f"must be a string, got {json_kind(schema[key])}")
    for key in _COUNT_KEYWORDS:
        if key in schema and not (_is_integer(schema[key]) and schema[key] >= 0):
            raise _SchemaError(
                _child(path, key), f"must be an integer >= 0, got {_show(schema[key])}"
            )
    for key in ("minimum", "maximum"):
        if key in schema and not _is_number(schema[key]):
            raise _SchemaError(_child(path, key), f"must be a number, got {json_kind(schema[key])}")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        value = schema.get(key)
        if key in schema and not (_is_number(value) or isinstance(value, bool)):
            raise _SchemaError(
                _child(path, key), f"must be a number or a boolean, got {json_kind(value)}"
            )
    if "additionalProperties" in schema and not isinstance(schema["additionalProperties"], bool):
        raise _SchemaError(
            _child(path, "additionalProperties"),
            f"must be a boolean (schemas are not supported here), "
            f"got {json_kind(schema['additionalProperties'])}",
        )
    _check_required(schema, path)
    if "enum" in schema:
        _check_enum(schema["enum"], schema_type, _child(path, "enum"))
    if schema_type == "array" and "items" not in schema:
        raise _SchemaError(path, 'a schema of type "array" needs "items"')
    if schema_type == "object" and "properties" not in schema:
        raise _SchemaError(path, 'a schema of type "object" needs "properties"')
    return _sub_schemas(schema, path)


def _check_type(schema: dict[str, Any], path: str) -> str:
    if "type" not in schema:
        raise _SchemaError(path, f'"type" is required (one of {", ".join(_SCHEMA_TYPES)})')
    schema_type = schema["type"]
    where = _child(path, "type")
    if isinstance(schema_type, list):
        raise _SchemaError(
            where, f"must be a single type name, not an array ({_show(schema_type)})"
        )
    if not isinstance(schema_type, str) or schema_type not in _SCHEMA_TYPES:
        raise _SchemaError(
            where, f"must be one of {', '.join(_SCHEMA_TYPES)}, got {_show(schema_type)}"
        )
    return schema_type


def _check_required(schema: dict[str, Any], path: str) -> None:
    if "required" not in schema:
        return
    required = schema["required"]
    where = _child(path, "required")
    if not isinstance(required, list):
        raise _SchemaError(where, f"must be an array of strings, got {json_kind(required)}")
    for index, item in enumerate(required):
        if not isinstance(item, str):
            raise _SchemaError(f"{where}[{index}]", f"must be a string, got {json_kind(item)}")


_ENUM_ITEM_MATCHES: Final[dict[str, Callable[[object], bool]]] = {
    "string": lambda item: isinstance(item, str),
    "number": _is_number,
    "integer": _is_integer,
    "boolean": lambda item: isinstance(item, bool),
}


def _check_enum(enum: object, schema_type: str, path: str) -> None:
    if schema_type in _NO_ENUM_TYPES:
        raise _SchemaError(path, f'is not allowed for type "{schema_type}"')
    if not isinstance(enum, list):
        raise _SchemaError(path, f"must be an array, got {json_kind(enum)}")
    matches = _ENUM_ITEM_MATCHES[schema_type]
    for index, item in enumerate(enum):
        if not matches(item):
            raise _SchemaError(
                f"{path}[{index}]",
                f'{_show(item)} does not match the schema type "{schema_type}"',
            )


def _sub_schemas(schema: dict[str, Any], path: str) -> list[tuple[str, object]]:
    children: list[tuple[str, object]] = []
    if "properties" in schema:
        properties = schema["properties"]
        where = _child(path, "properties")
        if not isinstance(properties, dict):
            raise _SchemaError(
                where, f"must be an object mapping names to schemas, got {json_kind(properties)}"
            )
        children.extend((_child(where, name), sub) for name, sub in properties.items())
    if "items" in schema:
        items = schema["items"]
        where = _child(path, "items")
        if isinstance(items, dict):
            children.append((where, items))
        elif isinstance(items, list):
            children.extend((f"{where}[{index}]", sub) for index, sub in enumerate(items))
        else:
            raise _SchemaError(
                where, f"must be a schema or an array of schemas, got {json_kind(items)}"
            )
    return children


# ----------------------------------------------------------------------------- tool_choice

_CHOICE_TYPES_HINT: Final = 'expected "function", "custom" or "allowed_tools"'


def parse_tool_choice(raw: object = msgspec.UNSET) -> ToolChoice:
    """The request's tool choice.

    Absent vs null: pass `msgspec.UNSET` (the default) when the field is absent, which is what
    a msgspec Struct field declared `tool_choice: Any | msgspec.UnsetType = msgspec.UNSET`
    holds when the key is missing; absent means auto. `None` is an explicit JSON null and is
    400 `unknown ToolChoice type: null`, as in the reference.

    Strings: "none", "required", anything else is auto. Objects by "type": "function" names a
    tool (from `function.name`, else a flat `name`); "custom" and "allowed_tools" are accepted
    but not enforced (auto); any other or missing type is 400.
    """
    if raw is msgspec.UNSET:
        return ToolChoice("auto")
    if isinstance(raw, str):
        if raw == "none":
            return ToolChoice("none")
        if raw == "required":
            return ToolChoice("required")
        return ToolChoice("auto")  # the reference treats every other string as auto
    if not isinstance(raw, dict):
        raise RequestError(
            400,
            f"unknown ToolChoice type: {json_kind(raw)}; tool_choice must be "
            f'"none", "auto", "required" or an object with a "type"',
            param="tool_choice",
        )
    choice_type = raw.get("type", msgspec.UNSET)
    if choice_type == "function":
        return ToolChoice("named", _named_tool(raw))
    if choice_type in ("custom", "allowed_tools"):
        return ToolChoice("auto")
    if choice_type is msgspec.UNSET:
        shown = '(missing "type")'
    elif isinstance(choice_type, str):
        shown = choice_type
    else:
        shown = _show(choice_type)
    raise RequestError(
        400, f"unknown ToolChoice type: {shown}; {_CHOICE_TYPES_HINT}", param="tool_choice.type"
    )


def _named_tool(raw: dict[str, Any]) -> str:
    function = raw.get("function")
    if function is not None and not isinstance(function, dict):
        raise RequestError(
            400,
            f"tool_choice.function must be an object, got {json_kind(function)}",
            param="tool_choice.function",
        )
    # Chat form first, then the flat Responses-API form; null or "" counts as no name.
    candidates = [
        ("tool_choice.function.name", function.get("name") if function else None),
        ("tool_choice.name", raw.get("name")),
    ]
    for param, name in candidates:
        if name is None or name == "":
            continue
        if not isinstance(name, str):
            raise RequestError(400, f"{param} must be a string, got {json_kind(name)}", param=param)
        return name
    raise RequestError(400, "tool_choice function requires a name", param="tool_choice")


def tool_candidates(tools: list[Tool] | None, choice: ToolChoice) -> list[Tool]:
    """The tools a generated call may use; [] means no tool calls.

    Unlike the reference (500 at generation time), a choice the tools cannot satisfy is a 400:
    a named tool missing from `tools`, or "required" with no tools at all.
    """
    if choice.mode == "none":
        return []
    available = tools or []
    if choice.mode == "named":
        for tool in available:
            if tool.name == choice.name:
                return [tool]  # the first of duplicate names, as the reference picks
        raise RequestError(
            400,
            f"tool with name '{choice.name}' requested in tool_choice but not found in the "
            "tools list",
            param="tool_choice",
        )
    if choice.mode == "required" and not available:
        raise RequestError(
            400,
            'tool_choice "required" needs at least one tool in tools: '
            "no tools available to create tool calls",
            param="tool_choice",
        )
    return list(available)


# ------------------------------------------------------------------------- response_format


def parse_response_format(raw: object) -> ResponseFormat | None:
    """The request's response format, or None when absent or null.

    OpenAI shapes (also vLLM's): {"type": "text"}, {"type": "json_object"} and
    {"type": "json_schema", "json_schema": {"name", "schema", "strict", ...}}. The schema is
    only shape-checked (an object): the tool whitelist does not apply, since real-world
    response schemas use $ref, anyOf and the like. Every error is 400, param "response_format".
    """
    if raw is None or raw is msgspec.UNSET:
        return None
    if not isinstance(raw, dict):
        _bad_format(f"response_format must be an object, got {json_kind(raw)}")
    kinds = ", ".join(f'"{kind}"' for kind in _RESPONSE_FORMAT_KINDS)
    if "type" not in raw or raw["type"] is None:
        _bad_format(f"response_format.type is required: one of {kinds}")
    kind = raw["type"]
    if kind == "text" or kind == "json_object":
        return ResponseFormat(kind)
    if kind != "json_schema":
        shown = kind if isinstance(kind, str) else _show(kind)
        _bad_format(f"unknown response_format type: {shown}; expected one of {kinds}")
    spec = raw.get("json_schema")
    if spec is None:
        _bad_format('response_format.json_schema is required when type is "json_schema"')
    if not isinstance(spec, dict):
        _bad_format(f"response_format.json_schema must be an object, got {json_kind(spec)}")
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        _bad_format(f"response_format.json_schema.name must be a string, got {json_kind(name)}")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        _bad_format(
            f"response_format.json_schema.strict must be a boolean, got {json_kind(strict)}"
        )
    schema = spec.get("schema")
    if schema is None:
        _bad_format('response_format.json_schema.schema is required when type is "json_schema"')
    if not isinstance(schema, dict):
        _bad_format(
            "response_format.json_schema.schema must be an object (a JSON Schema), "
            f"got {json_kind(schema)}"
        )
    return ResponseFormat("json_schema", schema=schema, name=name)


def _bad_format(message: str) -> NoReturn:
    raise RequestError(400, message, param="response_format")


def probe_schema(
    schema: Mapping[str, Any], what: str, param: str, settings: SynthesisSettings
) -> None:
    """Generates one throwaway value, so that a schema no value can satisfy is a 400 before
    the request is admitted (a stream has not started yet), not an error mid-stream."""
    try:
        synthesize(random.Random(0), schema, settings)
    except SynthesisError as error:
        raise RequestError(400, f"cannot generate a value for {what}: {error}", param) from None
    except RecursionError:
        message = f"cannot generate a value for {what}: the schema is nested too deeply"
        raise RequestError(400, message, param) from None
    except (OverflowError, ValueError, TypeError, ArithmeticError) as error:
        # A safety net: schemagen should raise SynthesisError for every bad schema.
        raise RequestError(400, f"cannot generate a value for {what}: {error}", param) from None


def plan_tools(
    candidates: list[Tool], forced: bool, settings: SynthesisSettings, max_calls: int | None = None
) -> ToolPlan | None:
    """The engine's view of the callable tools, each checked to be generable."""
    if not candidates:
        return None
    with budgeted():  # one synthesis budget for all of them, however many tools there are
        for tool in candidates:
            probe_schema(tool.parameters, f"tool '{tool.name}'", "tools", settings)
    return ToolPlan(tuple((t.name, t.parameters) for t in candidates), forced, max_calls)
