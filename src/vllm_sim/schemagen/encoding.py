"""Generated values as compact, deterministic JSON text."""

from __future__ import annotations

import json
from typing import Any, Final

# Go's encoding/json escapes these so the output is safe inside HTML <script> elements.
_GO_ESCAPES: Final = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


def arguments_json(value: Any) -> str:
    """Compact JSON with sorted keys at every level, non-ASCII kept, HTML characters escaped
    as Go's encoding/json does (`<` -> `\\u003c`, `>`, `&`, U+2028, U+2029)."""
    text = json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
    )
    # These characters can only occur inside JSON strings, so a plain translation is safe.
    return text.translate(_GO_ESCAPES)
