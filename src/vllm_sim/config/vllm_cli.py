"""vLLM 0.32's `vllm serve` options, read from `vllm_serve_options.json`, and vLLM's ways of
reading their values (argparse's types, vLLM's human-readable integers, JSON arguments).

The JSON file holds facts only (names, types, nargs, choices, defaults, the flags 0.32
removed); this module holds the rules, and raises `VllmArgumentError` with vLLM's wording so
a wrong value for a vLLM flag reads as `vllm serve` would report it.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, cast

DATA_FILE = "vllm_serve_options.json"

ValueType = Literal[
    "bool",
    "int",
    "float",
    "str",
    "json",
    "json_or_str",
    "human_int",
    "human_int_or_auto",
    "csv_list",
    "lora_module",
]
Nargs = Literal["+", "?", "append"]
AUTO = -1  # vLLM's `auto` / -1 for --max-model-len: "derive it"


class JsonCheck(enum.Enum):
    """How vLLM reads a JSON option: into one of its config classes (an object), or as-is."""

    CONFIG = "config"
    LOADS = "loads"


class VllmArgumentError(ValueError):
    """A value vLLM rejects; the text is what follows `argument --flag: ` in vLLM's error."""


@dataclass(frozen=True, slots=True)
class VllmOption:
    names: tuple[str, ...]  # argparse's option strings, in its order: ("--x", "--no-x", "-x")
    type: ValueType
    group: str
    default: Any = None
    nargs: Nargs | None = None
    choices: tuple[Any, ...] | None = None
    lower_underscore: bool = False  # the value is lower-cased, '-' -> '_', before the choice
    store_true: bool = False  # a bool with no --no- form
    const: Any = None  # the value of a bare `nargs='?'` option
    json: JsonCheck | None = None

    @property
    def name(self) -> str:
        """The main long name, e.g. `--tensor-parallel-size`."""
        return self.names[0]

    @property
    def key(self) -> str:
        return self.name.removeprefix("--")

    @property
    def display(self) -> str:
        """How argparse names the option in errors: `--tensor-parallel-size/-tp`."""
        return "/".join(self.names)

    @property
    def is_bool(self) -> bool:
        return self.type == "bool"


@dataclass(frozen=True, slots=True)
class RemovedFlag:
    """A flag vLLM 0.32 no longer has: `vllm serve` rejects it as an unrecognized argument."""

    name: str
    takes_value: bool
    hint: str = ""


def _option(row: dict[str, Any]) -> VllmOption:
    choices = row.get("choices")
    json_check = row.get("json")
    return VllmOption(
        names=tuple(row["names"]),
        type=cast(ValueType, row["type"]),
        group=row["group"],
        default=row.get("default"),
        nargs=cast(Nargs | None, row.get("nargs")),
        choices=tuple(choices) if choices else None,
        lower_underscore=row.get("choice_case") == "lower_underscore",
        store_true=row.get("bool") == "store_true",
        const=row.get("const"),
        json=JsonCheck(json_check) if json_check else None,
    )


def _load() -> tuple[str, tuple[VllmOption, ...], tuple[RemovedFlag, ...]]:
    text = resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    options = tuple(_option(row) for row in data["options"])
    removed = tuple(RemovedFlag(**row) for row in data["removed"])
    return data["vllm_version"], options, removed


VLLM_CLI_VERSION, OPTIONS, REMOVED_FLAGS = _load()
BY_KEY: dict[str, VllmOption] = {option.key: option for option in OPTIONS}
# Every long option string (including the --no- forms and second names) -> its option.
LONG_NAMES: dict[str, VllmOption] = {
    name: option for option in OPTIONS for name in option.names if name.startswith("--")
}
SHORT_NAMES: dict[str, VllmOption] = {
    name: option for option in OPTIONS for name in option.names if not name.startswith("--")
}
REMOVED: dict[str, RemovedFlag] = {flag.name: flag for flag in REMOVED_FLAGS}


def is_negated(option: VllmOption, name: str) -> bool:
    return option.is_bool and name.startswith("--no-") and not option.key.startswith("no-")


def find_long(token: str, name: str) -> tuple[VllmOption, str] | None:
    """The option a long name (`--max_num_seq`) means, and its full spelling: underscores read
    as dashes, then any unique prefix, as argparse allows. `token` is the argv item, for the
    error an ambiguous prefix raises."""
    name = name.replace("_", "-")
    if name in LONG_NAMES:
        return LONG_NAMES[name], name
    matches = [candidate for candidate in LONG_NAMES if candidate.startswith(name)]
    if len(matches) > 1:
        raise VllmArgumentError(f"ambiguous option: {token} could match {', '.join(matches)}")
    return (LONG_NAMES[matches[0]], matches[0]) if matches else None


def looks_like_option(item: str) -> bool:
    """What argparse refuses as a value: an item starting with '-' that is no negative number."""
    return item.startswith("-") and item != "-" and not _NEGATIVE_NUMBER.fullmatch(item)


_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")

# Value conversion, as argparse and vLLM's type functions do it.

_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_JSON_OBJECT_TEXT = re.compile(r"\s*\{.*\}\s*", re.DOTALL)


def human_readable_int(text: str, type_name: str = "human_readable_int") -> int:
    """`1k` = 1000, `1K` = 1024, `25.6k` = 25600, `4096`; a decimal with K/M/G/T is an error."""
    match = _HUMAN_INT.fullmatch(text.strip())
    if match is None:
        return _python_int(text, type_name)
    number, unit = match.groups()
    if unit in _DECIMAL_UNITS:
        return int(float(number) * _DECIMAL_UNITS[unit])
    if "." in number:
        raise VllmArgumentError(
            f"Decimals are not allowed with binary suffixes like {unit}. "
            f"Did you mean to use {number}{unit.lower()} instead?"
        )
    return int(number) * _BINARY_UNITS[unit]


def human_readable_int_or_auto(text: str) -> int:
    stripped = text.strip()
    if stripped == "-1" or stripped.lower() == "auto":
        return AUTO
    return human_readable_int(text, "human_readable_int_or_auto")


def _python_int(text: str, type_name: str = "int") -> int:
    try:
        return int(text)
    except ValueError:
        raise VllmArgumentError(f"invalid {type_name} value: {text!r}") from None


def _python_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise VllmArgumentError(f"invalid float value: {text!r}") from None


def parse_json(option: VllmOption, text: str) -> Any:
    """A JSON option's value: any JSON for plain `json.loads` options, an object for those
    vLLM reads into a config class (whose keys and values we do not check)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        if option.json is JsonCheck.CONFIG:
            raise VllmArgumentError(f"Invalid JSON: {error}") from None
        # vLLM names the function with its memory address; the address is left out.
        raise VllmArgumentError(f"Value {text} cannot be converted to <function loads>.") from None
    if option.json is JsonCheck.CONFIG and not isinstance(data, dict):
        raise VllmArgumentError("Input should be a JSON object")
    return data


def _typed(option: VllmOption, text: str) -> Any:
    match option.type:
        case "int":
            return _python_int(text)
        case "float":
            return _python_float(text)
        case "human_int":
            return human_readable_int(text)
        case "human_int_or_auto":
            return human_readable_int_or_auto(text)
        case "json":
            return parse_json(option, text)
        case "json_or_str":
            return parse_json(option, text) if _JSON_OBJECT_TEXT.fullmatch(text) else text
        case "csv_list":
            return [int(item) if item.isdigit() else item for item in text.split(",")]
        case _:
            return text


def convert(option: VllmOption, text: str) -> Any:
    """One value as vLLM reads it, checked against the option's choices."""
    if option.choices is None:
        return _typed(option, text)
    if None in option.choices and text in ("", "None"):
        return None  # vLLM's optional types read these as None
    if option.lower_underscore:
        text = text.lower().replace("-", "_")
    value = _typed(option, text)
    if value not in option.choices:
        choices = ", ".join(repr(choice) for choice in option.choices)
        raise VllmArgumentError(f"invalid choice: {value!r} (choose from {choices})")
    return value


def unrecognized_message(items: list[str], hints: list[str]) -> str:
    """vLLM's error for flags it does not have, with its hint for --task."""
    return " ".join(["unrecognized arguments:", *items, *dict.fromkeys(hints)])
