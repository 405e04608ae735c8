"""FNV-1a 32-bit hashing: the simulated tokenizer's token ids."""

from __future__ import annotations

from typing import Final

FNV_OFFSET_BASIS: Final = 2166136261
FNV_PRIME: Final = 16777619
_MASK_32: Final = 0xFFFFFFFF


def fnv1a_32(text: str) -> int:
    """FNV-1a 32-bit hash of `text`'s UTF-8 bytes.

    Lone surrogates (possible in Python strings decoded from JSON escapes) are
    encoded with `surrogatepass` so that every string gets an id instead of raising.
    """
    value = FNV_OFFSET_BASIS
    for byte in text.encode("utf-8", "surrogatepass"):
        value = ((value ^ byte) * FNV_PRIME) & _MASK_32
    return value
