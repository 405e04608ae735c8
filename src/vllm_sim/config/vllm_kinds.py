"""Value kinds of settings named after vLLM flags: read as `vllm serve` reads them.

A setting the reference does not have (`--max-num-batched-tokens`, `--uvicorn-log-level`,
`--kv-transfer-config`, ...) takes vLLM's syntax and reports a bad value in vLLM's words
(`VllmArgumentError`); `--max-model-len`, a reference flag, keeps Go's integers and their
errors and also takes vLLM's `32k`, `32K` and `auto`.
"""

from __future__ import annotations

import json
from typing import Any

from .gosyntax import parse_go_int
from .kinds import Kind, YamlMismatch, YamlValue
from .vllm_cli import (
    AUTO,
    VllmArgumentError,
    VllmOption,
    convert,
    human_readable_int_or_auto,
)

_LABELS = {"int": "int", "float": "float", "human_int": "int", "json": "json", "str": "string"}


class VllmValueKind(Kind):
    """A scalar as vLLM's parser reads it: its type, its choices, its error texts."""

    def __init__(self, option: VllmOption) -> None:
        self.option = option
        self.label = _LABELS.get(option.type, option.type)
        self.go_type = self.label
        self.zero = "none" if option.type == "json" else '""'

    def parse_text(self, text: str) -> Any:
        return convert(self.option, text)

    def from_yaml(self, value: YamlValue) -> Any:
        if value.tag == "!!map" and self.option.type == "json":
            return value.data  # a JSON option may be written as a YAML mapping
        if value.text is None:
            raise YamlMismatch(value, self.go_type)
        try:
            return self.parse_text(value.text)
        except VllmArgumentError as error:
            raise ValueError(f"line {value.line}: {error}") from None

    def show(self, value: Any) -> str:
        if value is None:
            return ""
        return json.dumps(value) if isinstance(value, dict | list) else str(value)


class MaxModelLenKind(Kind):
    """The reference's integer (Go syntax, Go's errors), or vLLM's `1k`, `32K`, `auto`/-1
    (stored as -1: derive it from the model)."""

    label, go_type, zero = "int", "int", "0"

    def parse_text(self, text: str) -> int:
        try:
            return parse_go_int(text)
        except ValueError as go_error:
            try:
                return human_readable_int_or_auto(text)
            except VllmArgumentError:
                raise go_error from None

    def from_yaml(self, value: YamlValue) -> int:
        if value.text is None:
            raise YamlMismatch(value, self.go_type)
        try:
            return self.parse_text(value.text)
        except ValueError:
            raise YamlMismatch(value, self.go_type) from None

    def show(self, value: Any) -> str:
        return "auto" if value == AUTO else str(value)
