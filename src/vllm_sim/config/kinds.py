"""Value kinds: how one setting's value is read from argv, YAML and JSON, and shown back.

Each kind speaks Go's syntax on the command line (what pflag accepts), yaml.v3's rules in
files, and encoding/json's rules in `/admin/config`, so files and scripts written for the Go
simulator keep working.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from .durations import Duration, format_duration, parse_duration
from .fake_metrics import (
    FakeMetrics,
    decode_fake_metrics,
    fake_metrics_to_json,
    finite_number,
    is_int,
    json_type,
)
from .gosyntax import format_go_float, go_quote, parse_go_bool, parse_go_float, parse_go_int
from .phases import PhaseSchedule, decode_schedule, load_phases_text, schedule_to_json
from .values import LoraModule

# yaml.v3 also reads these plain scalars as booleans when the target is a bool.
_YAML_EXTRA_BOOLS = {"y": True, "Y": True, "n": False, "N": False}


@dataclass(frozen=True, slots=True)
class YamlValue:
    """A YAML node reduced to what the kinds need (the loader builds it)."""

    tag: str  # short tag: "!!int", "!!str", "!!seq", ...
    text: str | None  # scalar text, None for sequences and mappings
    plain: bool  # an unquoted scalar, the only kind yaml.v3 resolves to non-strings
    line: int
    data: Any  # the constructed Python value
    items: tuple[YamlValue, ...] = ()


class YamlMismatch(ValueError):
    """A YAML value of the wrong type, reported as yaml.v3 does (`cannot unmarshal ...`)."""

    def __init__(self, value: YamlValue, go_type: str, detail: str = "") -> None:
        text = ""
        if value.text is not None:
            shown = value.text if len(value.text) <= 10 else value.text[:7] + "..."
            text = f" `{shown}`"
        reason = f": {detail}" if detail else ""
        super().__init__(
            f"line {value.line}: cannot unmarshal {value.tag}{text} into {go_type}{reason}"
        )


class JsonMismatch(TypeError):
    """A JSON value of the wrong type; `got` is its JSON type name."""

    def __init__(self, value: object) -> None:
        super().__init__(json_type(value))
        self.got = json_type(value)


class BadItem(ValueError):
    """One item of a list flag is invalid; `item` is the offending argv text."""

    def __init__(self, item: str, detail: str) -> None:
        super().__init__(detail)
        self.item = item


def loads_json(text: str) -> Any:
    """json.loads without NaN/Infinity, which Go's decoder rejects too; a lone surrogate
    escape (`\\ud800`) becomes U+FFFD, as Go decodes it."""

    def reject(constant: str) -> Any:
        raise ValueError(f"invalid JSON literal {constant}")

    data = json.loads(text, parse_constant=reject)
    return without_surrogates(data) if _SURROGATE_ESCAPE.search(text) else data


_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def valid_text(text: str) -> str:
    """`text` with each lone surrogate (an argv byte that is not UTF-8, a JSON or YAML
    escape) replaced by U+FFFD, as Go holds such text: a setting that reaches an answer
    must always encode."""
    return _SURROGATE.sub("\ufffd", text)


def without_surrogates(value: Any) -> Any:
    """Decoded JSON with valid_text applied to every string in it, keys included;
    iterative, so any depth the decoder accepted is walked."""
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        node = parent[key]
        if isinstance(node, str):
            parent[key] = valid_text(node)
        elif isinstance(node, dict):
            parent[key] = node = {valid_text(k): v for k, v in node.items()}
            stack.extend((node, k) for k in node)
        elif isinstance(node, list):
            stack.extend((node, i) for i in range(len(node)))
    return root[0]


class Kind:
    """Base of all kinds. Scalar kinds implement parse_text, list kinds parse_texts."""

    label = ""  # the type shown in help and docs
    zero = ""  # how docs show the zero value
    go_type = ""  # the Go type named in YAML/JSON mismatch messages
    is_bool = False
    is_list = False
    needs_value = False  # a list flag that must be followed by at least one value
    null_clears = False  # JSON null empties it (Go slices) instead of leaving it unchanged

    def parse_text(self, text: str) -> Any:
        raise NotImplementedError

    def parse_texts(self, texts: tuple[str, ...]) -> Any:
        raise NotImplementedError

    def from_yaml(self, value: YamlValue) -> Any:
        raise NotImplementedError

    def from_json(self, value: object) -> Any:
        raise JsonMismatch(value)

    def to_json(self, value: Any) -> object:
        return value

    def show(self, value: Any) -> str:
        """The value as help and docs print it; "" hides a zero default."""
        return str(value) if value else ""


class IntKind(Kind):
    label, go_type, zero = "int", "int", "0"

    def parse_text(self, text: str) -> int:
        return parse_go_int(text)

    def from_yaml(self, value: YamlValue) -> int:
        if value.plain and value.text is not None:
            try:
                return parse_go_int(value.text)
            except ValueError:
                pass
        if value.tag == "!!int" and is_int(value.data):
            return int(value.data)
        raise YamlMismatch(value, self.go_type)

    def from_json(self, value: object) -> int:
        if not is_int(value):
            raise JsonMismatch(value)
        assert isinstance(value, int)
        return value


class FloatKind(Kind):
    label, go_type, zero = "float", "float64", "0"

    def parse_text(self, text: str) -> float:
        value = parse_go_float(text)
        if not math.isfinite(value):  # NaN would slip through every range check
            raise ValueError(f"{text} is not a finite number")
        return value

    def from_yaml(self, value: YamlValue) -> float:
        data = value.data
        if value.tag == "!!str" and value.plain and value.text is not None:
            with contextlib.suppress(ValueError):
                data = parse_go_float(value.text)
        if isinstance(data, int | float) and not isinstance(data, bool) and math.isfinite(data):
            return float(data)
        raise YamlMismatch(value, self.go_type)

    def from_json(self, value: object) -> float:
        # 1e400 decodes to infinity (Go: "cannot unmarshal number 1e400 ... of type float64")
        number = finite_number(value)
        if number is None:
            raise JsonMismatch(value)
        return number

    def show(self, value: Any) -> str:
        return format_go_float(value) if value else ""


class StrKind(Kind):
    label, go_type, zero = "string", "string", '""'

    def parse_text(self, text: str) -> str:
        return text

    def from_yaml(self, value: YamlValue) -> str:
        if value.text is None:
            raise YamlMismatch(value, self.go_type)
        return value.text  # yaml.v3 keeps any scalar's literal text for a string

    def from_json(self, value: object) -> str:
        if not isinstance(value, str):
            raise JsonMismatch(value)
        return value

    def show(self, value: Any) -> str:
        return go_quote(value) if value else ""


class BoolKind(Kind):
    label, go_type, zero, is_bool = "bool", "bool", "false", True

    def parse_text(self, text: str) -> bool:
        return parse_go_bool(text)

    def from_yaml(self, value: YamlValue) -> bool:
        if value.tag == "!!bool":
            return bool(value.data)
        if value.plain and value.text in _YAML_EXTRA_BOOLS:
            return _YAML_EXTRA_BOOLS[value.text]
        raise YamlMismatch(value, self.go_type)

    def from_json(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise JsonMismatch(value)
        return value

    def show(self, value: Any) -> str:
        return "true" if value else ""


class DurationKind(Kind):
    label, go_type, zero = "duration", "time.Duration", "0s"

    def parse_text(self, text: str) -> Duration:
        return parse_duration(text)

    def from_yaml(self, value: YamlValue) -> Duration:
        if value.tag == "!!int" and is_int(value.data):
            # The documented (deprecated) integer form means milliseconds; the reference
            # rejects it although its own Helm chart writes `timeToFirstToken: 500`.
            return Duration(int(value.data) * 1_000_000)
        if value.tag != "!!str" or value.text is None:
            raise YamlMismatch(value, self.go_type)
        try:
            return parse_duration(value.text)
        except ValueError as error:
            raise YamlMismatch(value, self.go_type, str(error)) from None

    def from_json(self, value: object) -> Duration:
        """A JSON number is nanoseconds; strings are parsed first by the admin layer."""
        if isinstance(value, str):
            return parse_duration(value)
        if not is_int(value):
            raise JsonMismatch(value)
        assert isinstance(value, int)
        return Duration(value)

    def to_json(self, value: Any) -> object:
        return format_duration(value)

    def show(self, value: Any) -> str:
        return format_duration(value) if value else ""


class StrListKind(Kind):
    label, go_type, zero, is_list, null_clears = "strings", "[]string", "[]", True, True

    def parse_texts(self, texts: tuple[str, ...]) -> tuple[str, ...]:
        return texts

    def from_yaml(self, value: YamlValue) -> tuple[str, ...]:
        if value.tag != "!!seq":
            raise YamlMismatch(value, self.go_type)
        return tuple(StrKind().from_yaml(item) for item in value.items)

    def from_json(self, value: object) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise JsonMismatch(value)
        return tuple(value)

    def to_json(self, value: Any) -> object:
        return list(value) if value else None  # Go shows an unset list as null

    def show(self, value: Any) -> str:
        return " ".join(value)


_JSON_LIST = "expected a JSON array of strings"


def _is_str_list(data: object) -> TypeGuard[list[str]]:
    return isinstance(data, list) and all(isinstance(item, str) for item in data)


def _json_list_type(data: object) -> str:
    if not isinstance(data, list):
        return json_type(data)
    odd = next(item for item in data if not isinstance(item, str))
    return f"an array holding a {json_type(odd)}"


class JsonStrListKind(Kind):
    """A list given as one JSON array of strings (`'["http://a.example"]'`), as vLLM reads
    its CORS flags; a repeated flag keeps its last value. In YAML, a sequence of strings or
    that same JSON text."""

    label, go_type, zero = "json", "[]string", "[]"

    def parse_text(self, text: str) -> tuple[str, ...]:
        try:
            data = loads_json(text)
        except (ValueError, RecursionError) as error:
            raise ValueError(f"{_JSON_LIST}: {error}") from None
        if not _is_str_list(data):
            raise ValueError(f"{_JSON_LIST}, got {_json_list_type(data)}")
        return tuple(data)

    def from_yaml(self, value: YamlValue) -> tuple[str, ...]:
        if value.tag == "!!seq":
            return StrListKind().from_yaml(value)
        if value.tag != "!!str" or value.text is None:
            raise YamlMismatch(value, self.go_type)
        try:
            return self.parse_text(value.text)
        except ValueError as error:
            raise YamlMismatch(value, self.go_type, str(error)) from None

    def from_json(self, value: object) -> tuple[str, ...]:
        if not _is_str_list(value):
            raise JsonMismatch(value)
        return tuple(value)

    def to_json(self, value: Any) -> object:
        return list(value)

    def show(self, value: Any) -> str:
        return json.dumps(list(value)) if value else ""


def decode_lora(text: str) -> LoraModule:
    """One LoRA as JSON `{"name":..,"path":..,"base_model_name":..}` (other keys ignored), or
    vLLM's `name=path` (which the reference refuses)."""
    if not text.lstrip().startswith("{") and "=" in text:
        name, _, path = text.partition("=")
        return LoraModule(name, path)
    try:
        data = loads_json(text)
    except ValueError as error:
        raise ValueError(f'expected JSON like {{"name":"l1","path":"/p"}}: {error}') from None
    if not isinstance(data, dict):
        raise ValueError(f"cannot unmarshal {json_type(data)} into a LoRA module object")
    fields = {key: data.get(key, "") for key in ("name", "path", "base_model_name")}
    for key, field_value in fields.items():
        if not isinstance(field_value, str):
            raise ValueError(f"cannot unmarshal {json_type(field_value)} into LoRA {key} string")
    return LoraModule(**fields)


class LoraListKind(Kind):
    label, go_type, zero, is_list = "json...", "[]string", "[]", True

    def parse_texts(self, texts: tuple[str, ...]) -> tuple[LoraModule, ...]:
        modules = []
        for text in texts:
            try:
                modules.append(decode_lora(text))
            except ValueError as error:
                raise BadItem(text, str(error)) from None
        return tuple(modules)

    def from_yaml(self, value: YamlValue) -> tuple[LoraModule, ...]:
        texts = StrListKind().from_yaml(value)  # YAML holds each LoRA as a JSON string
        modules = []
        for item, text in zip(value.items, texts, strict=True):
            try:
                modules.append(decode_lora(text))
            except ValueError as error:
                raise YamlMismatch(item, "LoRA module", str(error)) from None
        return tuple(modules)

    def to_json(self, value: Any) -> object:
        if not value:
            return None
        return [
            {"base_model_name": m.base_model_name, "name": m.name, "path": m.path} for m in value
        ]

    def show(self, value: Any) -> str:
        return " ".join(module.name for module in value)


class FakeMetricsKind(Kind):
    label, go_type, zero, is_list, needs_value = "json", "fake metrics", "unset", True, True

    def parse_texts(self, texts: tuple[str, ...]) -> FakeMetrics | None:
        first = texts[0]  # the reference uses only the first value
        try:
            data = loads_json(first)
            return None if data is None else decode_fake_metrics(data)
        except ValueError as error:
            raise BadItem(first, str(error)) from None

    def from_yaml(self, value: YamlValue) -> FakeMetrics:
        if value.tag != "!!map":
            raise YamlMismatch(value, "fake metrics mapping")
        try:
            return decode_fake_metrics(value.data, from_yaml=True)
        except ValueError as error:
            raise ValueError(f"line {value.line}: {error}") from None

    def to_json(self, value: Any) -> object:
        return None if value is None else fake_metrics_to_json(value)

    def show(self, value: Any) -> str:
        return "set" if value is not None else ""


class PhasesKind(Kind):
    """A phase schedule (see `phases`). On the command line a file's path or the schedule
    as inline YAML/JSON; in YAML the list or mapping itself, or a file's path; in JSON the
    list or mapping (null or [] for none: the schedule stops)."""

    label, go_type, zero, null_clears = "file", "phase schedule", "none", True

    def parse_text(self, text: str) -> PhaseSchedule | None:
        return load_phases_text(text)

    def from_yaml(self, value: YamlValue) -> PhaseSchedule | None:
        if value.tag == "!!str" and value.text is not None:
            return load_phases_text(value.text)
        return decode_schedule(value.data)

    def from_json(self, value: object) -> PhaseSchedule | None:
        if isinstance(value, str):  # a path would read the server's files for the caller
            raise JsonMismatch(value)
        return decode_schedule(value)

    def to_json(self, value: Any) -> object:
        return None if value is None else schedule_to_json(value)

    def show(self, value: Any) -> str:
        return "set" if value is not None else ""


INT, FLOAT, STRING, BOOL, DURATION = IntKind(), FloatKind(), StrKind(), BoolKind(), DurationKind()
STRINGS, LORAS, FAKE_METRICS = StrListKind(), LoraListKind(), FakeMetricsKind()
JSON_STRINGS, PHASES = JsonStrListKind(), PhasesKind()
