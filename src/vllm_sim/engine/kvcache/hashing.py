"""llm-d compatible KV block hashes: canonical CBOR + FNV-1a-64 chain.

    H(parent, tokens, extra) = FNV-1a-64(canonical_CBOR([parent, tokens, extra]))
    root     = H(FNV-1a-64(seed), null, model)
    hash[i]  = H(hash[i-1] or root, block_i_tokens, extra_i)

These must be bit-identical to the llm-d router's (cbor2 `canonical=True` / fxamacker canonical
mode), so the encoder below emits RFC 7049 canonical CBOR for exactly the types the chain uses.

Hashing runs for every prompt, and FNV-1a is a strictly sequential byte loop. In the compiled
build it runs on machine integers (fnv.py). In pure Python, where it is the cost that matters,
three things keep it down:

* `_fnv_tables` splits the state so most per-byte work is on small ints, and folds eight
  bytes into one big-int multiply-add (see there): some 20-25% less time than the textbook loop.
* A prompt's token ids are CBOR-encoded in a few C-level passes when they all share one head
  width (the simulated tokenizer's 32-bit ids almost always do), else through a small cache.
* Each chain step is memoised on (parent, encoded block): prompts sharing a prefix (multi-turn
  chats, system prompts, repeated benchmark prompts) rehash only their new blocks.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Final

from vllm_sim.engine.kvcache import fnv

__all__ = [
    "block_hashes",
    "canonical_cbor",
    "fnv1a_64",
    "init_hash",
    "mm_block_extras",
    "root_hash",
]

FNV_OFFSET_BASIS: Final = 0xCBF29CE484222325
FNV_PRIME: Final = 0x100000001B3
_MASK_64: Final = (1 << 64) - 1
_MASK_56: Final = (1 << 56) - 1
_MAX_UINT: Final = _MASK_64

# ---------------------------------------------------------------------------------------------
# FNV-1a-64
#
# Pure-Python FNV is bound by big-int arithmetic (three 64-bit operations per byte in the
# textbook loop). Split the state as s = 256*g + l. XOR with a byte only touches l, and the low
# byte of a product depends only on the low bytes of the factors, so for byte b with x = l ^ b:
#     l' = (x*P) & 0xFF          g' = g*P + ((x*P) >> 8)   (mod 2**56)
# The l/x chain needs only small ints (cached, no allocation) and 256-entry lookups. Over eight
# bytes the g updates fold into g8 = g*P**8 + sum_k ((x_k*P) >> 8) * P**(7-k), read from eight
# 256-entry tables, leaving ~10 big-int operations per 8 bytes instead of 24 (20-25% faster).
# The tables stay tiny on purpose: 64K-entry two-byte tables measured slower (cache misses).
# ---------------------------------------------------------------------------------------------

_P8_56: Final = pow(FNV_PRIME, 8, 1 << 56)
_LOW_AFTER: Final = [(x * FNV_PRIME) & 0xFF for x in range(256)]
# _HIGH_AFTER[k][x] = ((x*P) >> 8) * P**k  (mod 2**56): byte x's carry into g, k bytes from the end.
_HIGH_AFTER: Final = [
    [(((x * FNV_PRIME) >> 8) * pow(FNV_PRIME, k, 1 << 56)) & _MASK_56 for x in range(256)]
    for k in range(8)
]


def _fnv_tables(state: int, data: bytes) -> int:
    """FNV-1a-64 of `data` continued from `state` (a previous FNV-1a-64 value)."""
    n = len(data)
    by8 = n & ~7
    g = state >> 8
    low = state & 0xFF
    lo = _LOW_AFTER
    h0, h1, h2, h3, h4, h5, h6, h7 = _HIGH_AFTER
    p8 = _P8_56
    mask = _MASK_56
    it = iter(data[:by8])
    for b0, b1, b2, b3, b4, b5, b6, b7 in zip(it, it, it, it, it, it, it, it, strict=False):
        x0 = low ^ b0
        x1 = lo[x0] ^ b1
        x2 = lo[x1] ^ b2
        x3 = lo[x2] ^ b3
        x4 = lo[x3] ^ b4
        x5 = lo[x4] ^ b5
        x6 = lo[x5] ^ b6
        x7 = lo[x6] ^ b7
        low = lo[x7]
        g = (g * p8 + h7[x0] + h6[x1] + h5[x2] + h4[x3] + h3[x4] + h2[x5] + h1[x6] + h0[x7]) & mask
    state = (g << 8) | low
    for byte in data[by8:]:  # at most seven left: the textbook step
        state = ((state ^ byte) * FNV_PRIME) & _MASK_64
    return state


# Compiled, fnv.py's machine-integer loop is an order of magnitude faster than the loop
# above; interpreted, it is slower.
_COMPILED: Final = fnv.__file__ is not None and not fnv.__file__.endswith(".py")
_fnv_continue: Final = fnv.fnv_continue_native if _COMPILED else _fnv_tables


def fnv1a_64(data: bytes) -> int:
    """FNV-1a 64-bit hash of `data`."""
    return _fnv_continue(FNV_OFFSET_BASIS, data)


# ---------------------------------------------------------------------------------------------
# Canonical CBOR (RFC 7049 §3.9): shortest-form heads, definite lengths, map keys sorted by
# encoded length first, then bytewise. Only what the hash chain needs is supported.
# ---------------------------------------------------------------------------------------------


def _head(major: int, value: int) -> bytes:
    """Initial byte(s) of a data item: major type plus an argument in the shortest form."""
    top = major << 5
    if value < 24:
        return bytes((top | value,))
    if value < 0x100:
        return bytes((top | 24, value))
    if value < 0x1_0000:
        return bytes((top | 25,)) + value.to_bytes(2, "big")
    if value < 0x1_0000_0000:
        return bytes((top | 26,)) + value.to_bytes(4, "big")
    if value <= _MAX_UINT:
        return bytes((top | 27,)) + value.to_bytes(8, "big")
    raise ValueError(f"CBOR argument out of range: {value}")


def _text(value: str) -> bytes:
    data = value.encode("utf-8")
    return _head(3, len(data)) + data


def _encode_into(value: object, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\xf6")
    elif isinstance(value, bool):
        # bool is an int subclass; CBOR has distinct true/false, which the hashes never use, so
        # refuse rather than silently encode True as 1.
        raise TypeError("canonical_cbor does not encode booleans")
    elif isinstance(value, int):
        if value < 0:
            raise ValueError(f"canonical_cbor encodes unsigned integers only, got {value}")
        out.append(_head(0, value))
    elif isinstance(value, str):
        out.append(_text(value))
    elif isinstance(value, list | tuple):
        out.append(_head(4, len(value)))
        for item in value:
            _encode_into(item, out)
    elif isinstance(value, Mapping):
        entries: list[tuple[bytes, object]] = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"canonical_cbor map keys must be str, got {type(key).__name__}")
            entries.append((_text(key), item))
        # Canonical order compares the *encoded* keys: shorter first, then bytewise.
        entries.sort(key=lambda entry: (len(entry[0]), entry[0]))
        out.append(_head(5, len(entries)))
        for encoded_key, item in entries:
            out.append(encoded_key)
            _encode_into(item, out)
    else:
        raise TypeError(f"canonical_cbor cannot encode {type(value).__name__}")


def canonical_cbor(value: object) -> bytes:
    """Canonical CBOR of an unsigned int (< 2**64), None, str, list/tuple or str-keyed mapping."""
    out: list[bytes] = []
    _encode_into(value, out)
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# Token arrays
# ---------------------------------------------------------------------------------------------


# array() is native-endian; CBOR arguments are big-endian.
_LITTLE_ENDIAN: Final = sys.byteorder == "little"


def _array_code(itemsize: int) -> str:
    # 'I' / 'L' sizes are platform dependent; pick whichever has the wanted width.
    for code in ("H", "I", "L", "Q"):
        if array(code).itemsize == itemsize:
            return code
    raise RuntimeError(f"no array typecode with itemsize {itemsize}")  # pragma: no cover


# Uniform-width runs: (exclusive upper bound, CBOR additional info, argument bytes, typecode).
_WIDTH_CLASSES: Final = (
    (24, -1, 0, ""),
    (0x100, 24, 1, ""),
    (0x1_0000, 25, 2, _array_code(2)),
    (0x1_0000_0000, 26, 4, _array_code(4)),
    (_MAX_UINT + 1, 27, 8, _array_code(8)),
)


_U32_CODE: Final = _WIDTH_CLASSES[3][3]
_BYTES_FROM_24: Final = bytes(range(24, 256))


def _width_class(value: int) -> int:
    for index, (bound, _, _, _) in enumerate(_WIDTH_CLASSES):
        if value < bound:
            return index
    raise ValueError(f"token id out of range (unsigned 64-bit): {value}")


def _interleave(info: int, planes: Sequence[bytes]) -> bytes:
    """Per token: head byte `info` (major type 0), then argument byte k from `planes[k]`."""
    n = len(planes[0])
    stride = len(planes) + 1
    out = bytearray(stride * n)
    out[0::stride] = bytes((info,)) * n
    for k, plane in enumerate(planes, 1):
        out[k::stride] = plane  # strided copies: C loops, no per-token Python
    return bytes(out)


def _encode_run(tokens: Sequence[int]) -> bytes | None:
    """Concatenated CBOR of `tokens` when they all share one head width, else None.

    Decided with C-level passes over byte planes (byte k of every token) instead of min()/max()
    over Python ints, which would cost more than the encoding itself.
    """
    try:
        values = array(_U32_CODE, tokens)  # OverflowError unless all are in [0, 2**32)
    except (OverflowError, TypeError):
        return _encode_run_by_range(tokens)  # ids >= 2**32 (or invalid ones): rare
    if _LITTLE_ENDIAN:
        values.byteswap()  # CBOR arguments are big-endian
    raw = values.tobytes()
    planes = [raw[0::4], raw[1::4], raw[2::4], raw[3::4]]
    n = len(tokens)
    high = int.from_bytes(planes[0], "big") | int.from_bytes(planes[1], "big")
    if high:  # The simulated tokenizer's FNV-32 ids land here (all >= 2**16) but 1 in 65536.
        return None if b"\x00" in high.to_bytes(n, "big") else _interleave(26, planes)
    if b"\x00" not in planes[2]:
        return _interleave(25, planes[2:])  # all in [256, 2**16)
    if any(planes[2]):
        return None
    last = planes[3]  # all below 256
    below_24 = len(last.translate(None, _BYTES_FROM_24))
    if below_24 == n:
        return last  # values below 24 are their own one-byte encoding
    return _interleave(24, planes[3:]) if below_24 == 0 else None


def _encode_run_by_range(tokens: Sequence[int]) -> bytes | None:
    """`_encode_run` for ids that do not all fit 32 bits."""
    lowest = min(tokens)
    if lowest < 0:
        raise ValueError(f"token ids must be unsigned integers, got {lowest}")
    low_class = _width_class(lowest)
    if _width_class(max(tokens)) != low_class:
        return None
    _, info, size, code = _WIDTH_CLASSES[low_class]
    if info < 0:
        return bytes(tokens)
    if size == 1:
        return _interleave(info, [bytes(tokens)])
    values = array(code, tokens)
    if _LITTLE_ENDIAN:
        values.byteswap()
    raw = values.tobytes()
    return _interleave(info, [raw[k::size] for k in range(size)])


# token id -> its CBOR encoding, filled on demand; bounded so odd inputs can't bloat it. A
# plain dict read with .get: a dict subclass with __missing__ cost ~10x more per token
# compiled (a real tokenizer's ids mix head widths, so every token of a prompt goes here).
_UINT_CBOR: Final[dict[int, bytes]] = {}
_UINT_CBOR_LIMIT: Final = 1 << 17  # covers typical vocabularies; caps the memory near 8 MB


def _uint_cbor(value: int) -> bytes:
    encoded = _UINT_CBOR.get(value)
    if encoded is not None:
        return encoded
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"token ids must be unsigned integers, got {value!r}")
    encoded = _head(0, value)
    if len(_UINT_CBOR) < _UINT_CBOR_LIMIT:
        _UINT_CBOR[value] = encoded
    return encoded


def _block_token_bytes(tokens: Sequence[int], n_blocks: int, block_size: int) -> list[bytes]:
    """The CBOR array of each full block's tokens."""
    covered = n_blocks * block_size
    run = tokens[:covered]
    array_head = _head(4, block_size)
    encoded = _encode_run(run)
    if encoded is not None:
        step = len(encoded) // n_blocks  # every block has the same byte length
        return [array_head + encoded[i : i + step] for i in range(0, len(encoded), step)]
    cache = _UINT_CBOR
    each = [cache.get(token) or _uint_cbor(token) for token in run]
    return [
        array_head + b"".join(each[start : start + block_size])
        for start in range(0, covered, block_size)
    ]


# ---------------------------------------------------------------------------------------------
# The chain
# ---------------------------------------------------------------------------------------------

_TEXT_ONLY_EXTRA: Final = b"\xf6"
# Every payload starts with a 3-element array, then (but for 1 in 2**32) an 8-byte parent head.
_STATE_AFTER_ARRAY3: Final = fnv1a_64(b"\x83")
_STATE_AFTER_U64_HEAD: Final = fnv1a_64(b"\x83\x1b")


@lru_cache(maxsize=4096)
def _mm_extra(hashes: tuple[str, ...]) -> bytes:
    """CBOR of a multimodal block's extra: [{"Hash": h}, ...]; blocks inside one item share it."""
    return canonical_cbor([{"Hash": h} for h in hashes])


@lru_cache(maxsize=1 << 14)
def _chain_step(parent: int, body: bytes) -> int:
    """H(parent, tokens, extra), with `body` the CBOR of the last two array elements."""
    if parent > 0xFFFF_FFFF:
        return _fnv_continue(_STATE_AFTER_U64_HEAD, parent.to_bytes(8, "big") + body)
    return _fnv_continue(_STATE_AFTER_ARRAY3, _head(0, parent) + body)


def init_hash(seed: str) -> int:
    """FNV-1a-64 of the seed's UTF-8 bytes (seed "" gives the FNV offset basis)."""
    return fnv1a_64(seed.encode("utf-8"))


@lru_cache(maxsize=256)
def root_hash(seed: str, model: str) -> int:
    """H(init_hash(seed), null, model): the parent of every prompt's first block."""
    return fnv1a_64(canonical_cbor([init_hash(seed), None, model]))


def block_hashes(
    tokens: Sequence[int],
    block_size: int,
    model: str,
    seed: str,
    extras: Sequence[Sequence[str] | None] | None = None,
) -> list[int]:
    """One hash per full block of `tokens`, chained from `root_hash(seed, model)`.

    `extras[i]` lists the multimodal hashes overlapping block i (see `mm_block_extras`); None or
    empty means a text-only block. Trailing tokens that do not fill a block are not hashed.
    """
    if block_size < 1:
        raise ValueError(f"block size must be positive, got {block_size}")
    n_blocks = len(tokens) // block_size
    if n_blocks == 0:
        return []
    bodies = _block_token_bytes(tokens, n_blocks, block_size)
    if extras is None:
        bodies = [body + _TEXT_ONLY_EXTRA for body in bodies]
    else:
        if len(extras) < n_blocks:
            # A short list means extras were computed for another prompt or block size.
            raise ValueError(f"{len(extras)} block extras for {n_blocks} full blocks")
        for i, extra in enumerate(extras[:n_blocks]):
            if isinstance(extra, str):
                # A bare str is a Sequence[str] too; hashing its characters would be silent junk.
                raise TypeError("each block extra must be a sequence of hash strings, not a str")
            bodies[i] += _mm_extra(tuple(extra)) if extra else _TEXT_ONLY_EXTRA
    step = _chain_step
    parent = root_hash(seed, model)
    hashes: list[int] = []
    append = hashes.append
    for body in bodies:
        parent = step(parent, body)
        append(parent)
    return hashes


def mm_block_extras(
    n_blocks: int,
    block_size: int,
    mm_hashes: Mapping[str, Sequence[str]],
    mm_placeholders: Mapping[str, Sequence[Mapping[str, int]]],
) -> list[list[str] | None]:
    """Per full block, the hashes of the multimodal items overlapping it, else None.

    They become the block's `extra` in the chain, so the same tokens with different images or
    audio give different block hashes.

    Per modality, hashes[k] pairs with placeholders[k] (surplus entries and modalities without
    placeholders are ignored); item k covers [offset, offset + length). Items are taken in
    offset order and a block [b*bs, (b+1)*bs) gets every item with start < end_b and end > b*bs.
    """
    if block_size < 1:
        raise ValueError(f"block size must be positive, got {block_size}")
    items: list[tuple[int, int, str]] = []
    for modality, hashes in mm_hashes.items():
        placeholders = mm_placeholders.get(modality)
        if not placeholders:
            continue
        for mm_hash, placeholder in zip(hashes, placeholders, strict=False):
            start = placeholder["offset"]
            items.append((start, start + placeholder["length"], mm_hash))
    items.sort(key=lambda item: item[0])  # stable: equal offsets keep modality/item order
    extras: list[list[str] | None] = [None] * n_blocks
    for start, end, mm_hash in items:
        # start < (b+1)*bs  <=>  b >= start // bs;   end > b*bs  <=>  b <= (end - 1) // bs.
        # Walking items in offset order appends each block's hashes in offset order.
        for b in range(max(0, start // block_size), min(n_blocks, (end - 1) // block_size + 1)):
            block = extras[b]
            if block is None:
                extras[b] = [mm_hash]
            else:
                block.append(mm_hash)
    return extras
