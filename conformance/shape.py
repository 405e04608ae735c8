"""The structure of a JSON document, content aside, and the differences between two of them.

A shape maps each key path (`choices[].message.content`) to the set of value kinds found
there: `null`, `bool`, `int`, `float`, `str`, `object`, `list` or `list(empty)`. A list's
elements are merged under `path[]`, so lists compare by element structure, not length; a key
missing from some elements of a list adds `absent`. Objects keyed by data (token -> logprob
maps) merge their values under `path{}` the same way. For keys whose values are protocol
vocabulary rather than content (`object`, `finish_reason`, `type`, ...) the value itself is
part of the kind (`str="length"`); ids keep their prefix and the form of the rest
(`str~chatcmpl-{hex:16}`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Shape = dict[str, frozenset[str]]

ABSENT = "absent"
ROOT = "$"

# Keys whose values are fixed by the protocol or by the request, never by generated content.
VALUE_KEYS = frozenset(
    {
        # Both servers tokenize prompts with the same model's tokenizer and template.
        "prompt_tokens",
        "input_tokens",
        "object",
        "type",
        "role",
        "finish_reason",
        "stop_reason",
        "stop_sequence",
        "status",
        "param",
        "code",
        "reason",
        "model",
        "index",
        "output_index",
        "content_index",
        "owned_by",
        "max_model_len",
        "event",
    }
)
ID_KEYS = frozenset({"id", "item_id", "call_id"})
# Objects whose keys are data, not field names: the completions API's top logprobs (token
# text -> logprob) and prompt logprobs (token id -> entry). Their values merge under `{}`.
MAP_PATHS = frozenset({"logprobs.top_logprobs[]", "prompt_logprobs[]"})

_ID_PREFIX = re.compile(r"^((?:[A-Za-z]+[-_])*)(.*)$", re.DOTALL)
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class ShapeRules:
    """Which keys carry compared values: the defaults, less what a case says depends on
    content, plus what it says is fixed (a client-chosen id)."""

    ignore_values: frozenset[str] = frozenset()
    exact_values: frozenset[str] = frozenset()
    value_keys: frozenset[str] = field(default=VALUE_KEYS)
    maps: frozenset[str] = field(default=MAP_PATHS)

    def is_map(self, path: str) -> bool:
        return any(path == m or path.endswith("." + m) for m in self.maps)

    def mode(self, key: str) -> str:
        if key in self.exact_values:
            return "exact"
        if key in self.ignore_values:
            return "kind"
        if key in self.value_keys:
            return "exact"
        return "id" if key in ID_KEYS else "kind"


def id_form(value: str) -> str:
    """`chatcmpl-8451ab03ac86554e` -> `chatcmpl-{hex:16}`: the prefix a client may parse, and
    the alphabet and length of the random rest."""
    match = _ID_PREFIX.match(value)
    prefix, rest = (match.group(1), match.group(2)) if match else ("", value)
    if _UUID.match(rest):
        kind = "uuid"
    elif re.fullmatch(r"[0-9a-f]+", rest):
        kind = "hex"
    elif re.fullmatch(r"[0-9A-Za-z]+", rest):
        kind = "alnum"
    else:
        kind = "text"
    return f"{prefix}{{{kind}:{len(rest)}}}"


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list" if value else "list(empty)"
    return "object"


def describe(key: str, value: Any, rules: ShapeRules) -> str:
    """The kind of one value, with its value where the key's values are compared."""
    base = kind(value)
    if base in ("list", "list(empty)", "object", "null", "float"):
        return base
    mode = rules.mode(key)
    if mode == "exact":
        return f"{base}={json.dumps(value)}"
    if mode == "id" and isinstance(value, str):
        return f"{base}~{id_form(value)}"
    return base


def shape_of(document: Any, rules: ShapeRules | None = None) -> Shape:
    """The shape of a decoded JSON document."""
    out: dict[str, set[str]] = {}
    _walk(document, ROOT, "", rules or ShapeRules(), out)
    return {path: frozenset(kinds) for path, kinds in out.items()}


def _walk(value: Any, path: str, key: str, rules: ShapeRules, out: dict[str, set[str]]) -> None:
    out.setdefault(path, set()).add(describe(key, value, rules))
    if isinstance(value, dict):
        if rules.is_map(path):
            _merge_children(list(value.values()), _join(path, "{}"), "{}", rules, out)
        else:
            for child_key, child in value.items():
                _walk(child, _join(path, str(child_key)), str(child_key), rules, out)
    elif isinstance(value, list) and value:
        _merge_children(value, _join(path, "[]"), key, rules, out)


def _merge_children(
    values: list[Any], base: str, key: str, rules: ShapeRules, out: dict[str, set[str]]
) -> None:
    """Walks each element on its own, then adds their merged shape under `base`."""
    shapes: list[Shape] = []
    for value in values:
        one: dict[str, set[str]] = {}
        _walk(value, base, key, rules, one)
        shapes.append({path: frozenset(kinds) for path, kinds in one.items()})
    for path, kinds in merge_elements(shapes):
        out.setdefault(path, set()).update(kinds)


def merge_elements(shapes: list[Shape]) -> Iterable[tuple[str, frozenset[str]]]:
    """The union of the elements' shapes. A key that an element's object lacks adds
    `absent`; paths below an element that is not an object at all (null, a scalar) add
    nothing, since the element's own kinds already say so."""
    paths: dict[str, None] = {}
    for shape in shapes:
        paths.update(dict.fromkeys(shape))
    for path in paths:
        kinds: set[str] = set()
        for shape in shapes:
            if path in shape:
                kinds.update(shape[path])
            elif "object" in shape.get(parent(path), ()):
                kinds.add(ABSENT)
        yield path, frozenset(kinds)


def parent(path: str) -> str:
    if path.endswith(("[]", "{}")):
        return path[:-2] or ROOT
    head, dot, _ = path.rpartition(".")
    return head if dot else ROOT


def _join(path: str, key: str) -> str:
    if key in ("[]", "{}"):
        return f"{path}{key}" if path != ROOT else key
    return key if path == ROOT else f"{path}.{key}"


@dataclass(frozen=True)
class ShapeDiff:
    path: str
    oracle: frozenset[str]
    sim: frozenset[str]


def diff_shapes(
    oracle: Mapping[str, frozenset[str]], sim: Mapping[str, frozenset[str]]
) -> list[ShapeDiff]:
    """Paths whose kinds differ, outermost first. A path missing on one side under a parent
    that already differs is not repeated: the parent's difference says it."""
    diffs: list[ShapeDiff] = []
    reported: set[str] = set()
    for path in sorted(set(oracle) | set(sim), key=_path_order):
        left = oracle.get(path, frozenset({ABSENT}))
        right = sim.get(path, frozenset({ABSENT}))
        if left == right:
            continue
        one_sided = path not in oracle or path not in sim
        if one_sided and any(parent in reported for parent in ancestors(path)):
            continue
        reported.add(path)
        diffs.append(ShapeDiff(path, left, right))
    return diffs


def ancestors(path: str) -> list[str]:
    """`a.b[].c` -> [`$`, `a`, `a.b`, `a.b[]`] (`{}`, a map's values, counts as `[]`)."""
    found = [ROOT]
    for i, char in enumerate(path):
        if char == ".":
            found.append(path[:i])
        elif path.startswith(("[]", "{}"), i):
            found.extend(p for p in (path[:i], path[: i + 2]) if p and p != path)
    return list(dict.fromkeys(found))


def _path_order(path: str) -> tuple[int, str]:
    return (0, "") if path == ROOT else (path.count(".") + path.count("[]") + 1, path)


def render_kinds(kinds: frozenset[str]) -> str:
    return " | ".join(sorted(kinds))
