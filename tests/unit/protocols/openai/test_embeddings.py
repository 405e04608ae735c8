"""The embedding functions on their own: construction, unit length, encodings, input parsing."""

from __future__ import annotations

import base64
import math
import struct
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_sim.engine.tokenizer.simulated import SimulatedTokenizer
from vllm_sim.errors import RequestError
from vllm_sim.protocols.openai.embeddings import (
    EMPTY_STRING,
    INPUT_REQUIRED,
    TOKEN_ID_LIMIT,
    embedding_vector,
    encode_embedding,
    parse_input,
    raw_embedding,
)

HELLO_WORLD_IDS = [3801292497, 933488787]
# The reference's (unnormalised) 4-dimension vector for these ids, and its base64 form.
HELLO_WORLD_RAW_4 = [0.408203125, -0.712890625, 0.6328125, 0.1484375]
HELLO_WORLD_RAW_4_BASE64 = "AADRPgCANr8AACI/AAAYPg=="

FUZZ = settings(max_examples=200, deadline=None, database=None)
token_ids = st.lists(st.integers(min_value=0, max_value=TOKEN_ID_LIMIT - 1), max_size=40)
dimensions = st.integers(min_value=1, max_value=300)
tokenizer = SimulatedTokenizer()


def norm(values: list[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in values))


def float32(value: float) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


def test_simulated_tokenizer_gives_the_spec_ids() -> None:
    assert tokenizer.encode("hello world") == HELLO_WORLD_IDS


def test_raw_values_match_the_reference_example() -> None:
    assert raw_embedding(HELLO_WORLD_IDS, 4) == HELLO_WORLD_RAW_4
    assert encode_embedding(array("f", HELLO_WORLD_RAW_4), "base64") == HELLO_WORLD_RAW_4_BASE64


def test_raw_construction_rules() -> None:
    # i < n: 2*(t mod 1024)/1024 - 1; i >= n: 2*(t[i mod n] mod 256)/256 - 1.
    ids = [0, 1024 + 512, 1023, 256 + 64]
    assert raw_embedding(ids, 2) == [-1.0, 0.0]
    assert raw_embedding(ids, 4) == [-1.0, 0.0, 1023 / 512 - 1, 320 / 512 - 1]
    assert raw_embedding(ids, 10)[4:] == [-1.0, -1.0, 2 * 255 / 256 - 1, -0.5, -1.0, -1.0]
    assert raw_embedding([], 3) == [0.0, 0.0, 0.0]


def test_hello_world_vector_is_the_normalised_reference_vector() -> None:
    length = norm(HELLO_WORLD_RAW_4)
    expected = [float32(v / length) for v in HELLO_WORLD_RAW_4]
    assert embedding_vector(HELLO_WORLD_IDS, 4).tolist() == expected


@pytest.mark.parametrize(
    ("ids", "size"),
    [([], 1), ([], 5), ([512], 1), ([512, 1536, 2560], 3), ([512, 1536, 2560, 7], 2)],
)
def test_all_zero_construction_gives_the_first_basis_vector(ids: list[int], size: int) -> None:
    assert all(v == 0.0 for v in raw_embedding(ids, size))
    assert embedding_vector(ids, size).tolist() == [1.0] + [0.0] * (size - 1)


def test_one_zero_value_is_not_the_zero_case() -> None:
    # [512] at 2 dimensions is [0, -1] before normalisation: it keeps its direction.
    assert embedding_vector([512], 2).tolist() == [0.0, -1.0]


@FUZZ
@given(token_ids, dimensions)
def test_vectors_are_unit_length_float32_and_keep_the_reference_direction(
    ids: list[int], size: int
) -> None:
    vector = embedding_vector(ids, size).tolist()
    assert len(vector) == size
    assert abs(norm(vector) - 1.0) < 1e-6
    assert all(float32(v) == v for v in vector)
    raw = raw_embedding(ids, size)
    length = norm(raw)
    if length:
        assert all(abs(v * length - r) < 1e-5 for v, r in zip(vector, raw, strict=True))


@FUZZ
@given(token_ids, dimensions)
def test_vectors_are_deterministic(ids: list[int], size: int) -> None:
    assert embedding_vector(ids, size) == embedding_vector(list(ids), size)


@FUZZ
@given(token_ids, dimensions)
def test_base64_is_little_endian_float32(ids: list[int], size: int) -> None:
    vector = embedding_vector(ids, size)
    floats = encode_embedding(vector, "float")
    encoded = encode_embedding(vector, "base64")
    assert isinstance(encoded, str)
    raw_bytes = base64.b64decode(encoded, validate=True)
    assert len(raw_bytes) == 4 * size
    assert list(struct.unpack(f"<{size}f", raw_bytes)) == floats


def test_large_dimension_count_is_quick_and_exact() -> None:
    vector = embedding_vector([1, 2, 3], 65536)
    assert len(vector) == 65536
    assert abs(norm(vector.tolist()) - 1.0) < 1e-6


# --- parse_input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hello world", [HELLO_WORLD_IDS]),
        (["hello world", "hello world"], [HELLO_WORLD_IDS, HELLO_WORLD_IDS]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([0, TOKEN_ID_LIMIT - 1], [[0, TOKEN_ID_LIMIT - 1]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
        ([[1, 2], []], [[1, 2], []]),
        ([[]], [[]]),
    ],
)
def test_parse_input_forms(value: object, expected: list[list[int]]) -> None:
    assert parse_input(value, tokenizer) == expected


@pytest.mark.parametrize(
    ("value", "param", "message"),
    [
        (None, "input", INPUT_REQUIRED),
        ([], "input", INPUT_REQUIRED),
        (5, "input", INPUT_REQUIRED),
        (True, "input", INPUT_REQUIRED),
        ({"a": 1}, "input", INPUT_REQUIRED),
        ("", "input", EMPTY_STRING),
        (["a", ""], "input[1]", EMPTY_STRING),
        (["a", 1], "input[1]", INPUT_REQUIRED),
        (["a", "b", None], "input[2]", INPUT_REQUIRED),
        ([1, "a"], "input[1]", "input[1] is a string"),
        ([1, 2, -1], "input[2]", "input[2] is out of range"),
        ([TOKEN_ID_LIMIT], "input[0]", "input[0] is out of range"),
        ([1.0], "input[0]", "input[0] is a non-integer number"),
        ([1, 2.5], "input[1]", "input[1] is a non-integer number"),
        ([1, True], "input[1]", "input[1] is a boolean"),
        ([1, [2]], "input[1]", "input[1] is an array"),
        ([[1], "a"], "input[1]", INPUT_REQUIRED),
        ([[1], [2, None]], "input[1][1]", "input[1][1] is null"),
        ([[1], [2, {}]], "input[1][1]", "input[1][1] is an object"),
        ([[1], [-5]], "input[1][0]", "input[1][0] is out of range"),
        ([[1], [2**64]], "input[1][0]", "input[1][0] is out of range"),
        ([None], "input[0]", INPUT_REQUIRED),
        ([True], "input[0]", INPUT_REQUIRED),
        ([{"text": "a"}], "input[0]", INPUT_REQUIRED),
    ],
)
def test_parse_input_errors_name_the_field(value: object, param: str, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_input(value, tokenizer)
    assert caught.value.status == 400
    assert caught.value.param == param
    assert caught.value.message.startswith(message)


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)


@FUZZ
@given(json_values)
def test_parse_input_accepts_token_ids_or_refuses_with_a_400(value: object) -> None:
    try:
        sequences = parse_input(value, tokenizer)
    except RequestError as error:
        assert error.status == 400
        assert error.param is not None and error.param.startswith("input")
        return
    assert sequences
    assert all(type(t) is int and 0 <= t < TOKEN_ID_LIMIT for ids in sequences for t in ids)
