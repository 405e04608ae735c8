"""Decoding a JSON request body into its protocol's typed form, with vLLM's leniencies, and
refusing it in vLLM's words.

vLLM reads bodies with FastAPI and pydantic: a body its schema refuses is a 400 of type
"Bad Request" whose message lists the failure as pydantic reports it (type, location, text,
the offending value) and whose `param` is that location (`body.n`). msgspec finds the same
failures in its own terms; they are translated here, one per answer (pydantic can list
several for one value, one per member of a union type).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
import msgspec.inspect

from vllm_sim.errors import RequestError
from vllm_sim.frontend.request_rules import VALIDATION_ERROR_TYPE, validation_error

T = TypeVar("T")

# Refusals of this server's own (bodies vLLM would read): worded as before, not as vLLM.
PARSE_ERROR_PREFIX = "Failed to read and parse request body, "
_NOT_TEXT = "There was an error parsing the body"  # FastAPI's, for bytes that are no text

_MSGSPEC = re.compile(r"(.*?)(?: - at `\$([^`]*)`)?", re.DOTALL)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")
_EXPECTED = re.compile(r"Expected `([^`]+)`, got `[^`]+`")
_BOUND = re.compile(r"Expected `(?:int|float)` (>=|<=|>|<) (\S+)")
_MISSING = re.compile(r"Object missing required field `([^`]+)`")
_ENUM = re.compile(r"Invalid enum value .*")

# pydantic's error type and text for a value of the wrong type, by the type msgspec wanted.
_TYPE_ERRORS = {
    "int": ("int_type", "Input should be a valid integer"),
    "float": ("float_type", "Input should be a valid number"),
    "bool": ("bool_type", "Input should be a valid boolean"),
    "str": ("string_type", "Input should be a valid string"),
    "array": ("list_type", "Input should be a valid list"),
    "object": ("dict_type", "Input should be a valid dictionary"),
}
# ... and for a string where a number or a boolean was wanted, which pydantic tries to read.
_PARSING = {
    "int": ("int_parsing", "Input should be a valid integer, unable to parse string as an integer"),
    "float": (
        "float_parsing",
        "Input should be a valid number, unable to parse string as a number",
    ),
    "bool": ("bool_parsing", "Input should be a valid boolean, unable to interpret input"),
}
_FRACTION = (
    "int_from_float",
    "Input should be a valid integer, got a number with a fractional part",
)
_NOT_OBJECT = (
    "model_attributes_type",
    "Input should be a valid dictionary or object to extract fields from",
)
_BOUNDS = {
    ">=": ("greater_than_equal", "greater than or equal to", "ge"),
    ">": ("greater_than", "greater than", "gt"),
    "<=": ("less_than_equal", "less than or equal to", "le"),
    "<": ("less_than", "less than", "lt"),
}
# vLLM bounds what an error echoes: a value's first 200 characters, an entry's first 1000.
_MAX_INPUT = 200
_MAX_ENTRY = 1000

Location = list[str | int]


def decode_body(body: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    """Decodes and type-checks a JSON body; a 400 as vLLM words it otherwise."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        reading = _python_reading(body)
        if reading is not None and reading.deduplicated is not None:
            return decode_body(reading.deduplicated, decoder)
        if reading is None or reading.repeats:  # Python's reader refuses it, or cannot
            raise _own_refusal(str(exc)) from None  # write it again (a lone surrogate)
        raise _invalid(str(exc), reading.value, decoder.type) from None
    except msgspec.DecodeError as exc:
        raise _unreadable(body, str(exc)) from None
    except RecursionError:
        raise _own_refusal("JSON is nested too deeply") from None


@dataclass(frozen=True, slots=True)
class _Reading:
    value: object
    repeats: bool  # whether a key is given twice
    deduplicated: bytes | None = None  # then the body with each key's last value


def _python_reading(body: bytes) -> _Reading | None:
    """The body as Python's json (and so vLLM) reads it, a duplicate key taking its last
    value; None when that reader refuses it too, or it holds a constant (NaN) JSON has not.

    msgspec checks each occurrence of a key, so `{"n": "x", "n": 2}` fails there while
    vLLM accepts it. Only a failed decode pays for this second look.
    """
    found = False

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal found
        result = dict(items)
        found = found or len(result) < len(items)
        return result

    try:
        value = json.loads(body, object_pairs_hook=pairs, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    try:
        return _Reading(value, found, msgspec.json.encode(value) if found else None)
    except ValueError:  # a lone surrogate cannot be encoded again, and must not slip through
        return _Reading(value, found)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _invalid(text: str, body: object, body_type: Any) -> RequestError:
    """msgspec's refusal of well-formed JSON (`body` as Python reads it), in pydantic's words."""
    match = _MSGSPEC.fullmatch(text)
    assert match is not None  # the pattern matches any text
    what, path = match.group(1), match.group(2) or ""
    loc = _location(path)
    value = _at(body, loc)
    if not loc and value is None:  # FastAPI takes a null body for no body
        return _entry("missing", loc, "Field required", None)
    if found := _EXPECTED.fullmatch(what):
        kind, words = _type_error(found.group(1), value, root=not loc)
        return _entry(kind, loc, words, value)
    if found := _BOUND.fullmatch(what):
        kind, words, key = _BOUNDS[found.group(1)]
        bound = _number(found.group(2))
        return _entry(kind, loc, f"Input should be {words} {bound}", value, {key: bound})
    if found := _MISSING.fullmatch(what):
        return _entry("missing", [*loc, found.group(1)], "Field required", value)
    if _ENUM.fullmatch(what):
        expected = _listed(_literal_values(msgspec.inspect.type_info(body_type), loc))
        words = f"Input should be {expected}"
        return _entry("literal_error", loc, words, value, {"expected": expected})
    return _own_refusal(text)  # a bound of msgspec's own, such as a number's range


def _literal_values(info: msgspec.inspect.Type, loc: Location) -> tuple[object, ...]:
    """The values the Literal at `loc` of a body type allows (pydantic lists them)."""
    for step in loc:
        info = _step(info, step)
    literals = info.types if isinstance(info, msgspec.inspect.UnionType) else (info,)
    return tuple(
        value
        for literal in literals
        if isinstance(literal, msgspec.inspect.LiteralType)
        for value in literal.values
    )


def _step(info: msgspec.inspect.Type, step: str | int) -> msgspec.inspect.Type:
    """The type one step into `info`: a struct's field, a list's item or a dict's value."""
    options = info.types if isinstance(info, msgspec.inspect.UnionType) else (info,)
    for option in options:
        if isinstance(option, msgspec.inspect.StructType) and isinstance(step, str):
            for field in option.fields:
                if field.encode_name == step:
                    return field.type
        if isinstance(option, msgspec.inspect.ListType) and isinstance(step, int):
            return option.item_type
        if isinstance(option, msgspec.inspect.DictType) and isinstance(step, str):
            return option.value_type
    return msgspec.inspect.AnyType()


def _listed(values: tuple[object, ...]) -> str:
    """pydantic's list of allowed values: `'a', 'b' or 'c'`."""
    shown = [repr(value) for value in values]
    if len(shown) < 2:
        return "".join(shown) or "one of the allowed values"
    return ", ".join(shown[:-1]) + " or " + shown[-1]


def _location(path: str) -> Location:
    """msgspec's `.messages[0].content` as pydantic's location; a map's key, which msgspec
    does not name (`[...]`), ends it."""
    loc: Location = []
    for found in _SEGMENT.finditer(path):
        name, index = found.group(1), found.group(2)
        if name is None and index is None:
            break
        loc.append(name if name is not None else int(index))
    return loc


def _at(value: object, loc: Location) -> object:
    for step in loc:
        if isinstance(value, dict) and isinstance(step, str):
            value = value.get(step)
        elif isinstance(value, list) and isinstance(step, int) and step < len(value):
            value = value[step]
        else:
            return None
    return value


def _type_error(expected: str, value: object, root: bool) -> tuple[str, str]:
    wanted = next((name for name in expected.split(" | ") if name != "null"), "null")
    if wanted == "object" and root:
        return _NOT_OBJECT  # the body itself is a model, read from a dictionary
    if isinstance(value, str) and wanted in _PARSING:
        return _PARSING[wanted]
    if wanted == "int" and isinstance(value, float) and not value.is_integer():
        return _FRACTION
    return _TYPE_ERRORS.get(wanted, _TYPE_ERRORS["str"])


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _entry(
    kind: str, loc: Location, words: str, value: object, ctx: dict[str, object] | None = None
) -> RequestError:
    """One error as vLLM prints it: pydantic's error dict, its location dotted."""
    where = ".".join(["body", *map(str, loc)])
    entry: dict[str, object] = {"type": kind, "loc": where, "msg": words, "input": _shown(value)}
    if ctx is not None:
        entry["ctx"] = ctx
    text = str(entry)
    if len(text) > _MAX_ENTRY:
        text = text[:_MAX_ENTRY] + "...[truncated]"
    return validation_error(text, where)


def _shown(value: object) -> str:
    """The offending value as vLLM echoes it: a string as is, a container by its size,
    anything else as Python prints it, each cut at 200 characters."""
    if isinstance(value, list | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_INPUT else text[:_MAX_INPUT] + "...[truncated]"


def _unreadable(body: bytes, detail: str) -> RequestError:
    """A body msgspec cannot parse, refused as vLLM refuses it when vLLM cannot either."""
    if not body:  # FastAPI takes an empty body for no body
        return _entry("missing", [], "Field required", None)
    try:
        json.loads(body)
    except json.JSONDecodeError as error:
        return _entry("json_invalid", [error.pos], "JSON decode error", {}, {"error": error.msg})
    except UnicodeDecodeError:
        return RequestError(400, _NOT_TEXT, None, VALIDATION_ERROR_TYPE)
    except (ValueError, RecursionError):
        pass
    return _own_refusal(detail)  # JSON only Python's reader accepts (NaN, a lone surrogate)


def _own_refusal(detail: str) -> RequestError:
    """A refusal of this server's own, of what vLLM would read, in this server's words."""
    match = _MSGSPEC.fullmatch(detail)
    path = match.group(2) if match else None
    return RequestError(400, PARSE_ERROR_PREFIX + detail, path.lstrip(".") if path else None)


def json_kind(value: object) -> str:
    """The JSON type name of a decoded value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int subclass in Python
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
