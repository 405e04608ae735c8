"""Decoding a JSON request body into its protocol's typed form, with vLLM's leniencies."""

from __future__ import annotations

import json
import re
from typing import TypeVar

import msgspec

from vllm_sim.errors import RequestError

T = TypeVar("T")

PARSE_ERROR_PREFIX = "Failed to read and parse request body, "
_PATH = re.compile(r" - at `\$\.?([^`]*)`$")


def decode_body(
    body: bytes, decoder: msgspec.json.Decoder[T], prefix: str = PARSE_ERROR_PREFIX
) -> T:
    """Decodes and type-checks a JSON body; a 400 naming the offending field otherwise."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        deduplicated = _last_key_wins(body)
        if deduplicated is not None:
            return decode_body(deduplicated, decoder, prefix)
        text = str(exc)
        match = _PATH.search(text)
        param = match.group(1) if match else None
        raise RequestError(400, prefix + text, param=param) from None
    except msgspec.DecodeError as exc:
        raise RequestError(400, prefix + str(exc)) from None
    except RecursionError:
        raise RequestError(400, prefix + "JSON is nested too deeply") from None


def _last_key_wins(body: bytes) -> bytes | None:
    """The body with every duplicate key reduced to its last value, as Python's json
    (and so vLLM) reads it; None when it has no duplicate keys.

    msgspec checks each occurrence of a key, so `{"n": "x", "n": 2}` would fail there
    while vLLM accepts it. Only a failed decode pays for this second look.
    """
    found = False

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal found
        result = dict(items)
        found = found or len(result) < len(items)
        return result

    try:
        value = json.loads(body, object_pairs_hook=pairs, parse_constant=_no_constant)
        return msgspec.json.encode(value) if found else None
    except (ValueError, RecursionError):
        # Python's reader is laxer than JSON: a lone surrogate (which cannot be encoded
        # again) or NaN must not slip through the second look.
        return None


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


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
