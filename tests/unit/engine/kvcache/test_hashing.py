"""llm-d compatible block hashes: CBOR, FNV-1a-64, chain, mm extras.

The V1-V3 vectors were confirmed against the llm-d router's Go library; everything else is
checked against hand-computed encodings (RFC 7049 appendix A where it has them) and against a
plain reference chain built from the textbook FNV loop, so the optimised paths cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_sim.engine.kvcache import hashing
from vllm_sim.engine.kvcache.hashing import (
    block_hashes,
    canonical_cbor,
    fnv1a_64,
    init_hash,
    mm_block_extras,
    root_hash,
)

MAX_U64 = 2**64 - 1
FNV_BASIS = 0xCBF29CE484222325

# ------------------------------------------------------------------------------- references


def reference_fnv(data: bytes) -> int:
    """The textbook FNV-1a-64 loop."""
    value = FNV_BASIS
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & MAX_U64
    return value


def reference_chain(
    tokens: Sequence[int],
    block_size: int,
    model: str,
    seed: str,
    extras: Sequence[Sequence[str] | None] | None = None,
) -> list[int]:
    """The chain written out literally: the root is FNV(CBOR([FNV(seed), None, model])), each
    full block FNV(CBOR([parent, tokens, extra])); no caches, no vectorised encoding, no pair
    tables."""
    parent = reference_fnv(canonical_cbor([reference_fnv(seed.encode()), None, model]))
    out = []
    for i in range(len(tokens) // block_size):
        extra = extras[i] if extras is not None else None
        encoded_extra = [{"Hash": h} for h in extra] if extra else None
        block = list(tokens[i * block_size : (i + 1) * block_size])
        parent = reference_fnv(canonical_cbor([parent, block, encoded_extra]))
        out.append(parent)
    return out


def reference_extras(
    n_blocks: int,
    block_size: int,
    mm_hashes: Mapping[str, Sequence[str]],
    mm_placeholders: Mapping[str, Sequence[Mapping[str, int]]],
) -> list[list[str] | None]:
    """Multimodal extras with the literal per-block overlap test: a block carries the hash of
    every item whose placeholder range overlaps it, in placeholder-offset order."""
    items = []
    for modality, hashes in mm_hashes.items():
        placeholders = mm_placeholders.get(modality, [])
        for k in range(min(len(hashes), len(placeholders))):
            start = placeholders[k]["offset"]
            items.append((start, start + placeholders[k]["length"], hashes[k]))
    items.sort(key=lambda item: item[0])
    out: list[list[str] | None] = []
    for b in range(n_blocks):
        lo, hi = b * block_size, (b + 1) * block_size
        found = [h for start, end, h in items if start < hi and end > lo]
        out.append(found or None)
    return out


def cbor_decode(data: bytes) -> object:
    """A strict decoder for the supported subset that also rejects non-canonical input."""
    value, pos = _decode_at(data, 0)
    assert pos == len(data), "trailing bytes"
    return value


def _head_at(data: bytes, pos: int) -> tuple[int, int, int]:
    initial = data[pos]
    major, info = initial >> 5, initial & 0x1F
    if info < 24:
        return major, info, pos + 1
    size = {24: 1, 25: 2, 26: 4, 27: 8}[info]
    argument = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
    assert argument >= (24 if size == 1 else 1 << (4 * size)), "head not in shortest form"
    return major, argument, pos + 1 + size


def _decode_at(data: bytes, pos: int) -> tuple[object, int]:
    if data[pos] == 0xF6:
        return None, pos + 1
    major, argument, pos = _head_at(data, pos)
    if major == 0:
        return argument, pos
    if major == 3:
        return data[pos : pos + argument].decode("utf-8"), pos + argument
    if major == 4:
        items = []
        for _ in range(argument):
            item, pos = _decode_at(data, pos)
            items.append(item)
        return items, pos
    assert major == 5, f"unsupported major type {major}"
    result: dict[str, object] = {}
    previous: bytes | None = None
    for _ in range(argument):
        key_start = pos
        key, pos = _decode_at(data, pos)
        encoded_key = data[key_start:pos]
        if previous is not None:
            assert (len(previous), previous) < (len(encoded_key), encoded_key), "key order"
        previous = encoded_key
        assert isinstance(key, str)
        result[key], pos = _decode_at(data, pos)
    return result, pos


cbor_values = st.recursive(
    st.none() | st.integers(0, MAX_U64) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=6), children, max_size=6)
    ),
    max_leaves=25,
)

# ------------------------------------------------------------------------------- FNV-1a-64


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),
        (b"a", 0xAF63DC4C8601EC8C),
        (b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a_64_known_vectors(data: bytes, expected: int) -> None:
    assert fnv1a_64(data) == expected


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_fnv1a_64_matches_textbook_loop(data: bytes) -> None:
    assert fnv1a_64(data) == reference_fnv(data)


def test_fnv1a_64_all_odd_and_even_lengths() -> None:
    data = bytes(range(256)) * 2
    for n in range(len(data) + 1):
        assert fnv1a_64(data[:n]) == reference_fnv(data[:n])


# ------------------------------------------------------------------------------- CBOR


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "00"),
        (1, "01"),
        (23, "17"),
        (24, "1818"),
        (255, "18ff"),
        (256, "190100"),
        (65535, "19ffff"),
        (65536, "1a00010000"),
        (2**32 - 1, "1affffffff"),
        (2**32, "1b0000000100000000"),
        (1_000_000_000_000, "1b000000e8d4a51000"),
        (2**64 - 1, "1bffffffffffffffff"),
    ],
)
def test_cbor_unsigned_ints_shortest_form(value: int, expected: str) -> None:
    assert canonical_cbor(value).hex() == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "60"),
        ("a", "6161"),
        ("IETF", "6449455446"),
        ('"\\', "62225c"),
        ("\u00fc", "62c3bc"),
        ("\u6c34", "63e6b0b4"),
        ("\U00010151", "64f0908591"),
        ("x" * 23, "77" + "78" * 23),
        ("x" * 24, "7818" + "78" * 24),
        ("x" * 256, "790100" + "78" * 256),
        ("test-model", "6a746573742d6d6f64656c"),
    ],
)
def test_cbor_text_strings(value: str, expected: str) -> None:
    assert canonical_cbor(value).hex() == expected


def test_cbor_null() -> None:
    assert canonical_cbor(None) == b"\xf6"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], "80"),
        ([1, 2, 3], "83010203"),
        ((1, 2, 3), "83010203"),
        ([1, [2, 3], [4, 5]], "8301820203820405"),
        (list(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819"),
        ([None, "a", [[]]], "83f661618180"),
        ([0] * 256, "990100" + "00" * 256),
    ],
)
def test_cbor_arrays(value: list[object] | tuple[object, ...], expected: str) -> None:
    assert canonical_cbor(value).hex() == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({}, "a0"),
        ({"Hash": "img_hash_A"}, "a164486173686a696d675f686173685f41"),
        ({"a": 1, "b": [2, 3]}, "a26161016162820203"),
        ({"b": 1, "a": 2}, "a2616102616201"),  # same length: bytewise
        ({"aa": 1, "b": 2}, "a261620262616101"),  # shorter key first, though "aa" < "b"
        # "\u00e9" is 2 UTF-8 bytes: after "z", and bytewise after "zz" (0xc3 > 0x7a).
        ({"\u00e9": 1, "zz": 2, "z": 3}, "a3617a03627a7a0262c3a901"),
        ({"a": {"b": None}}, "a16161a16162f6"),
    ],
)
def test_cbor_maps_canonical_key_order(value: dict[str, object], expected: str) -> None:
    assert canonical_cbor(value).hex() == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, ValueError),
        (2**64, ValueError),
        (True, TypeError),
        (1.5, TypeError),
        (b"bytes", TypeError),
        ({1: "x"}, TypeError),
        ([1, {2}], TypeError),
    ],
)
def test_cbor_rejects_unsupported_values(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        canonical_cbor(value)


@settings(deadline=None)
@given(cbor_values)
def test_cbor_round_trips_through_strict_decoder(value: object) -> None:
    encoded = canonical_cbor(value)
    assert cbor_decode(encoded) == value
    assert canonical_cbor(cbor_decode(encoded)) == encoded


@settings(deadline=None)
@given(cbor_values)
def test_cbor_matches_cbor2_canonical(value: object) -> None:
    cbor2 = pytest.importorskip("cbor2")
    assert canonical_cbor(value) == cbor2.dumps(value, canonical=True)


# ------------------------------------------------------------ the llm-d router's test vectors

ROOT_V1 = 17515353698173365712


def test_v1_init_root_and_payloads() -> None:
    assert init_hash("") == 14695981039346656037 == FNV_BASIS
    root_payload = canonical_cbor([init_hash(""), None, "test-model"])
    assert root_payload.hex() == "831bcbf29ce484222325f66a746573742d6d6f64656c"
    assert fnv1a_64(root_payload) == root_hash("", "test-model") == ROOT_V1
    block0 = canonical_cbor([ROOT_V1, list(range(1, 17)), None])
    assert block0.hex() == "831bf31309635ef2add0900102030405060708090a0b0c0d0e0f10f6"
    assert fnv1a_64(block0) == 9540012594951042066


def test_v1_block_hashes() -> None:
    hashes = block_hashes(list(range(1, 41)), 16, "test-model", "")
    assert hashes == [9540012594951042066, 16921089685996993662]


def test_v2_seed_and_mixed_width_tokens() -> None:
    model = "Qwen/Qwen2.5-1.5B-Instruct"
    tokens = [100, 200, 300, 400, 500, 600, 70000, 80000]
    assert init_hash("42") == 571532774284038691
    root = root_hash("42", model)
    assert root == 10213605654713153841
    payload = canonical_cbor([root, tokens, None])
    assert payload.hex() == (
        "831b8dbe043a9d19393188186418c819012c1901901901f41902581a000111701a00013880f6"
    )
    assert fnv1a_64(payload) == 8433396862772714866
    assert block_hashes(tokens, 8, model, "42") == [8433396862772714866]


V3_HASHES = {"image": ["img_hash_A"]}
V3_PLACEHOLDERS = {"image": [{"offset": 4, "length": 8}]}


def test_v3_multimodal_extras() -> None:
    tokens = list(range(1, 25))
    extras = mm_block_extras(3, 8, V3_HASHES, V3_PLACEHOLDERS)
    assert extras == [["img_hash_A"], ["img_hash_A"], None]
    payload = canonical_cbor([ROOT_V1, tokens[:8], [{"Hash": "img_hash_A"}]])
    assert payload.hex() == (
        "831bf31309635ef2add088010203040506070881a164486173686a696d675f686173685f41"
    )
    assert fnv1a_64(payload) == 17909592417116385076
    assert block_hashes(tokens, 8, "test-model", "", extras) == [
        17909592417116385076,
        278782942608244798,
        2493938736211088843,
    ]
    assert block_hashes(tokens, 8, "test-model", "") == [
        5577290583401719650,
        8754320283940647457,
        5194289493888567412,
    ]


# ------------------------------------------------------------------------------- chain


def test_partial_block_is_dropped() -> None:
    tokens = list(range(1, 41))
    assert len(block_hashes(tokens, 16, "test-model", "")) == 2
    assert block_hashes(tokens, 16, "test-model", "") == block_hashes(
        tokens[:32], 16, "test-model", ""
    )
    assert len(block_hashes(tokens[:47], 16, "test-model", "")) == 2


@pytest.mark.parametrize("tokens", [[], [1], list(range(15))])
def test_zero_full_blocks(tokens: list[int]) -> None:
    assert block_hashes(tokens, 16, "test-model", "") == []


def test_prefix_shares_leading_hashes() -> None:
    long_prompt = [(i * 2654435761) % 2**32 for i in range(200)]
    full = block_hashes(long_prompt, 16, "m", "")
    assert len(full) == 12
    for cut in (16, 17, 100, 160):
        assert block_hashes(long_prompt[:cut], 16, "m", "") == full[: cut // 16]
    changed = [*long_prompt[:40], 7, *long_prompt[41:]]
    other = block_hashes(changed, 16, "m", "")
    assert other[:2] == full[:2]
    assert all(a != b for a, b in zip(other[2:], full[2:], strict=True))


def test_model_name_changes_every_hash() -> None:
    tokens = list(range(64))
    base = block_hashes(tokens, 16, "base-model", "")
    lora = block_hashes(tokens, 16, "my-lora", "")
    assert len(base) == len(lora) == 4
    assert not set(base) & set(lora)


def test_seed_changes_every_hash() -> None:
    tokens = list(range(64))
    unseeded = block_hashes(tokens, 16, "m", "")
    seeded = block_hashes(tokens, 16, "m", "42")
    assert len(seeded) == 4
    assert not set(unseeded) & set(seeded)
    assert root_hash("", "m") != root_hash("42", "m")


TOKEN_RANGES = {
    "below 24": st.integers(0, 23),
    "one byte": st.integers(24, 255),
    "two bytes": st.integers(256, 65535),
    "four bytes": st.integers(65536, 2**32 - 1),
    "eight bytes": st.integers(2**32, MAX_U64),
    "mixed": st.integers(0, MAX_U64) | st.integers(0, 300) | st.integers(60000, 70000),
}


@pytest.mark.parametrize("width", list(TOKEN_RANGES))
@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_block_hashes_match_reference_chain(width: str, data: st.DataObject) -> None:
    block_size = data.draw(st.sampled_from([1, 2, 3, 8, 16, 24, 32]))
    tokens = data.draw(st.lists(TOKEN_RANGES[width], max_size=5 * block_size))
    model = data.draw(st.text(max_size=12))
    seed = data.draw(st.text(max_size=4))
    assert block_hashes(tokens, block_size, model, seed) == reference_chain(
        tokens, block_size, model, seed
    )


@settings(deadline=None, max_examples=60)
@given(data=st.data())
def test_block_hashes_with_extras_match_reference_chain(data: st.DataObject) -> None:
    tokens = data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=8, max_size=64))
    n_blocks = len(tokens) // 8
    extras = data.draw(
        st.lists(
            st.none() | st.lists(st.text(max_size=20), max_size=3),
            min_size=n_blocks,
            max_size=n_blocks + 2,
        )
    )
    assert block_hashes(tokens, 8, "m", "", extras) == reference_chain(tokens, 8, "m", "", extras)


@pytest.mark.parametrize(
    "tokens",
    [
        [65536] * 15 + [65535],  # one id just below the 32-bit fast path
        [2**32 - 1] * 15 + [2**32],  # one id just above it
        [70000, 2**32 - 1] * 8,
        [23] * 8 + [24] * 8,
        [255] * 8 + [256] * 8,
        [0] * 16,
        [2**64 - 1] * 16,
    ],
)
def test_width_boundaries_match_reference_chain(tokens: list[int]) -> None:
    assert block_hashes(tokens, 8, "m", "") == reference_chain(tokens, 8, "m", "")


@pytest.mark.parametrize("parent", [0, 23, 2**32 - 1, 2**32, MAX_U64])
def test_chain_step_parent_head_widths(parent: int) -> None:
    # Real parents are below 2**32 only once in 2**32 chains; the short head is tested directly.
    body = canonical_cbor(list(range(16))) + b"\xf6"
    expected = reference_fnv(canonical_cbor([parent, list(range(16)), None]))
    assert hashing._chain_step(parent, body) == expected


def test_empty_extra_is_text_only() -> None:
    tokens = list(range(32))
    assert block_hashes(tokens, 16, "m", "", [[], None]) == block_hashes(tokens, 16, "m", "")


def test_memoised_steps_give_identical_results() -> None:
    tokens = [(i * 40503) % 2**32 for i in range(320)]
    first = block_hashes(tokens, 16, "m", "s")
    hashing._chain_step.cache_clear()
    assert block_hashes(tokens, 16, "m", "s") == first
    assert block_hashes(tokens, 16, "m", "s") == first  # now served from the memo


@pytest.mark.parametrize(
    ("tokens", "block_size", "extras", "error"),
    [
        ([1, -1], 2, None, ValueError),
        ([1, 2**64], 2, None, ValueError),
        ([1, 2], 0, None, ValueError),
        ([1, 2, 3, 4], 2, [None], ValueError),  # fewer extras than full blocks
        ([1, 2], 2, ["img"], TypeError),  # a bare str, not a list of hashes
    ],
)
def test_block_hashes_rejects_bad_input(
    tokens: list[int],
    block_size: int,
    extras: list[list[str] | None] | None,
    error: type[Exception],
) -> None:
    with pytest.raises(error):
        block_hashes(tokens, block_size, "m", "", extras)


# ------------------------------------------------------------------------------- mm extras


def test_mm_items_sorted_by_offset_across_modalities() -> None:
    extras = mm_block_extras(
        4,
        8,
        {"image": ["img1", "img0"], "audio": ["aud"]},
        {
            "image": [{"offset": 20, "length": 4}, {"offset": 2, "length": 4}],
            "audio": [{"offset": 6, "length": 16}],
        },
    )
    assert extras == [["img0", "aud"], ["aud"], ["aud", "img1"], None]


def test_mm_surplus_entries_and_modalities_without_placeholders_ignored() -> None:
    extras = mm_block_extras(
        3,
        4,
        {"image": ["a", "b", "c"], "video": ["v"], "audio": []},
        {"image": [{"offset": 0, "length": 4}, {"offset": 8, "length": 4}], "audio": []},
    )
    assert extras == [["a"], None, ["b"]]
    short = mm_block_extras(2, 4, {"image": ["a"]}, {"image": [{"offset": 0, "length": 8}] * 3})
    assert short == [["a"], ["a"]]


def test_mm_no_items_means_text_only() -> None:
    assert mm_block_extras(3, 8, {"video": ["v"]}, {}) == [None, None, None]
    assert mm_block_extras(0, 8, V3_HASHES, V3_PLACEHOLDERS) == []


def test_mm_boundaries() -> None:
    # [8, 16) touches block 1 only; a zero-length item counts only strictly inside a block.
    assert mm_block_extras(3, 8, {"i": ["x"]}, {"i": [{"offset": 8, "length": 8}]}) == [
        None,
        ["x"],
        None,
    ]
    assert mm_block_extras(2, 8, {"i": ["x"]}, {"i": [{"offset": 8, "length": 0}]}) == [
        None,
        None,
    ]
    assert mm_block_extras(2, 8, {"i": ["x"]}, {"i": [{"offset": 3, "length": 0}]}) == [
        ["x"],
        None,
    ]
    # Items reaching past the last full block are clipped.
    assert mm_block_extras(2, 8, {"i": ["x"]}, {"i": [{"offset": 12, "length": 100}]}) == [
        None,
        ["x"],
    ]


@settings(deadline=None, max_examples=200)
@given(data=st.data())
def test_mm_block_extras_matches_literal_overlap_test(data: st.DataObject) -> None:
    block_size = data.draw(st.sampled_from([1, 4, 8, 16]))
    n_blocks = data.draw(st.integers(0, 8))
    placeholder = st.fixed_dictionaries(
        {"offset": st.integers(-5, 9 * block_size), "length": st.integers(0, 4 * block_size)}
    )
    modalities = st.sampled_from(["image", "audio", "video"])
    mm_hashes = data.draw(
        st.dictionaries(modalities, st.lists(st.text(max_size=3), max_size=4), max_size=3)
    )
    mm_placeholders = data.draw(
        st.dictionaries(modalities, st.lists(placeholder, max_size=4), max_size=3)
    )
    got = mm_block_extras(n_blocks, block_size, mm_hashes, mm_placeholders)
    assert got == reference_extras(n_blocks, block_size, mm_hashes, mm_placeholders)
