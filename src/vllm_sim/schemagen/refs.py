"""`$ref` resolution: JSON pointers inside the root schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final
from urllib.parse import unquote

from .context import Ctx, fail

MAX_REF_DEPTH: Final = 64  # a recursion that still has not ended here never will
# Keywords that never constrain a value: a `$ref` with only these beside it is the target.
_ANNOTATIONS: Final = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)


def follow_ref(root: Any, schema: Mapping[str, Any], ctx: Ctx) -> tuple[Any, Ctx]:
    """The schema a `$ref` stands for, with the keywords beside it, and the context there."""
    target, target_path = resolve(root, schema["$ref"], ctx)
    if ctx.depth + 1 > MAX_REF_DEPTH:
        raise fail("recursive schema never terminates", ctx)
    rest = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
    # Since draft 2020-12, keywords beside $ref apply too, exactly like an allOf.
    merged = {"allOf": [target, rest]} if rest else target
    return merged, replace(ctx, path=target_path, depth=ctx.depth + 1)


def resolve(root: Any, ref: Any, ctx: Ctx) -> tuple[Any, str]:
    """The node `ref` points to inside `root`, and its path for error messages."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise fail(f"unsupported $ref {ref!r} (only references inside the schema)", ctx)
    pointer = ref[1:]
    if pointer and not pointer.startswith("/"):
        raise fail(f"unsupported $ref {ref!r} (anchors are not supported)", ctx)
    node: Any = root
    path = "$"
    for raw in pointer.split("/")[1:]:
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
            path += f".{token}"
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
            path += f"[{token}]"
        else:
            raise fail(f"unresolvable $ref {ref!r}", ctx)
    return node, path
