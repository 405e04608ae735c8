"""POST /v1/embeddings on a running simulator: raw HTTP, the openai SDK, errors and a fuzz."""

from __future__ import annotations

import base64
import math
import re
import struct
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, event, given
from hypothesis import strategies as st

from tests.support.errors import (
    VALIDATION_PREFIX,
    VALIDATION_TYPE,
    assert_openai_error,
    unknown_model_message,
)
from tests.support.fixtures import http_fixture, openai_fixture, server_fixture
from tests.support.fuzz import fuzz_settings, json_scalars
from tests.support.http import json_ok
from tests.support.server import SimServer
from vllm_sim.protocols.openai.embeddings import (
    EMPTY_STRING,
    INPUT_REQUIRED,
    MAX_DIMENSIONS,
    TOKEN_ID_LIMIT,
    embedding_vector,
)

PATH = "/v1/embeddings"
HELLO_WORLD_IDS = [3801292497, 933488787]
PARSE_PREFIX = "Failed to read and parse request body, "
VALIDATION = VALIDATION_PREFIX


server = server_fixture()


http = http_fixture("server")


# Aliases, a small default size, request-id and pod headers, another seed.
_CUSTOM_ARGS = ["--served-model-name", "alias-a", "alias-b", "--default-embedding-dimensions", "8"]
_CUSTOM_ARGS += ["--enable-request-id-headers", "--seed", "7"]
custom = server_fixture(_CUSTOM_ARGS, env={"POD_NAME": "pod-1", "POD_NAMESPACE": "ns-1"})


sdk = openai_fixture("server")


def embedding_usage(tokens: int) -> dict[str, Any]:
    """vLLM's usage of a pooling answer: prompt tokens only, and null details."""
    return {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }


def embed(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    return json_ok(client.post(PATH, json=body))


def expected(ids: list[int], size: int) -> list[float]:
    return embedding_vector(ids, size).tolist()


def unit(vector: list[float]) -> bool:
    return abs(math.sqrt(math.fsum(v * v for v in vector)) - 1.0) < 1e-6


def tokenize(client: httpx.Client, text: str) -> list[int]:
    ids: list[int] = client.post("/tokenize", json={"prompt": text}).json()["tokens"]
    return ids


# --- the four input forms -------------------------------------------------------------------


def test_string_input_gives_one_default_sized_unit_vector(http: httpx.Client) -> None:
    text = "This is a test of the embeddings endpoint."
    ids = tokenize(http, text)
    answer = embed(http, {"model": "test-model", "input": text})
    assert answer["object"] == "list"
    assert answer["model"] == "test-model"
    [item] = answer["data"]
    assert item["object"] == "embedding"
    assert item["index"] == 0
    assert len(item["embedding"]) == 384
    assert item["embedding"] == expected(ids, 384)
    assert unit(item["embedding"])
    assert answer["usage"] == embedding_usage(len(ids))


def test_hello_world_is_the_normalised_reference_example(http: httpx.Client) -> None:
    answer = embed(http, {"input": "hello world", "dimensions": 4})
    vector = answer["data"][0]["embedding"]
    reference = [0.408203125, -0.712890625, 0.6328125, 0.1484375]
    length = math.sqrt(sum(v * v for v in reference))
    assert vector == pytest.approx([v / length for v in reference], abs=1e-7)
    assert vector == expected(HELLO_WORLD_IDS, 4)


def test_array_of_strings(http: httpx.Client) -> None:
    texts = ["hello world", "a second input", "hello world"]
    answer = embed(http, {"input": texts, "dimensions": 16})
    ids = [tokenize(http, text) for text in texts]
    assert [item["index"] for item in answer["data"]] == [0, 1, 2]
    assert [item["embedding"] for item in answer["data"]] == [expected(i, 16) for i in ids]
    assert answer["data"][0]["embedding"] == answer["data"][2]["embedding"]
    total = sum(map(len, ids))
    assert answer["usage"] == embedding_usage(total)


def test_array_of_token_ids_is_one_input(http: httpx.Client) -> None:
    answer = embed(http, {"input": [1, 2, 3], "dimensions": 10})
    [item] = answer["data"]
    assert item["embedding"] == expected([1, 2, 3], 10)
    assert answer["usage"] == embedding_usage(3)


def test_an_answer_has_vllms_keys(http: httpx.Client) -> None:
    answer = embed(http, {"input": "hello"})
    assert set(answer) == {"id", "object", "created", "model", "data", "usage"}
    assert re.fullmatch("embd-[0-9a-f]{16}", answer["id"])
    assert isinstance(answer["created"], int)


def test_array_of_token_id_arrays(http: httpx.Client) -> None:
    answer = embed(http, {"input": [[1, 2], [3], [0, TOKEN_ID_LIMIT - 1]], "dimensions": 5})
    assert [item["index"] for item in answer["data"]] == [0, 1, 2]
    vectors = [item["embedding"] for item in answer["data"]]
    assert vectors == [expected([1, 2], 5), expected([3], 5), expected([0, TOKEN_ID_LIMIT - 1], 5)]
    assert answer["usage"] == embedding_usage(5)


def test_text_and_its_token_ids_embed_the_same(http: httpx.Client) -> None:
    by_text = embed(http, {"input": "hello world", "dimensions": 32})
    by_ids = embed(http, {"input": HELLO_WORLD_IDS, "dimensions": 32})
    assert by_text["data"] == by_ids["data"]
    assert by_text["usage"] == by_ids["usage"] == embedding_usage(2)


def test_empty_token_sequence_is_the_first_basis_vector(http: httpx.Client) -> None:
    answer = embed(http, {"input": [[1], []], "dimensions": 4})
    assert answer["data"][1]["embedding"] == [1.0, 0.0, 0.0, 0.0]
    assert answer["usage"] == embedding_usage(1)


# --- dimensions, determinism, formats --------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_dimensions(http: httpx.Client, size: int) -> None:
    vector = embed(http, {"input": "hello world", "dimensions": size})["data"][0]["embedding"]
    assert len(vector) == size
    assert unit(vector)


def test_largest_dimension_count(http: httpx.Client) -> None:
    # One input of many tokens is one vector: the values cap counts inputs, not tokens.
    ids = list(range(1000))
    answer = embed(http, {"input": ids, "dimensions": MAX_DIMENSIONS})
    [item] = answer["data"]
    assert item["embedding"] == expected(ids, MAX_DIMENSIONS)
    assert answer["usage"]["prompt_tokens"] == 1000


def test_default_dimensions_are_not_capped_by_the_request_limit() -> None:
    with SimServer(["--default-embedding-dimensions", str(MAX_DIMENSIONS + 1)]) as sim:
        answer = httpx.post(sim.url + PATH, json={"input": [[1], [2]]}, timeout=30).json()
    assert [len(item["embedding"]) for item in answer["data"]] == [MAX_DIMENSIONS + 1] * 2


def test_same_input_same_vector_across_requests_and_seeds(
    http: httpx.Client, custom: SimServer
) -> None:
    bodies = [
        {"input": ["some text", "more text"], "dimensions": 64},
        {"input": [[9, 8, 7], []], "dimensions": 64, "encoding_format": "base64"},
    ]
    with httpx.Client(base_url=custom.url, timeout=30) as other:  # --seed 7, not 42
        for body in bodies:
            first = embed(http, body)
            again = embed(http, body)
            assert (again["data"], again["usage"]) == (first["data"], first["usage"])
            assert embed(other, body)["data"] == first["data"]


def test_float_values_are_float32(http: httpx.Client) -> None:
    vector = embed(http, {"input": "float32 check", "dimensions": 50})["data"][0]["embedding"]
    assert all(struct.unpack("<f", struct.pack("<f", v))[0] == v for v in vector)


@pytest.mark.parametrize("form", ["hello world", ["a b", "c"], [4, 5], [[4], [5, 6]]])
def test_base64_is_the_float_vector_as_little_endian_float32(
    http: httpx.Client, form: object
) -> None:
    floats = embed(http, {"input": form, "dimensions": 12})
    packed = embed(http, {"input": form, "dimensions": 12, "encoding_format": "base64"})
    assert packed["usage"] == floats["usage"]
    for as_floats, as_base64 in zip(floats["data"], packed["data"], strict=True):
        raw = base64.b64decode(as_base64["embedding"], validate=True)
        assert list(struct.unpack("<12f", raw)) == as_floats["embedding"]


def test_explicit_float_format_and_null_format(http: httpx.Client) -> None:
    plain = embed(http, {"input": "x y", "dimensions": 3})["data"]
    explicit = embed(http, {"input": "x y", "dimensions": 3, "encoding_format": "float"})
    assert explicit["data"] == plain
    assert embed(http, {"input": "x y", "dimensions": 3, "encoding_format": None})["data"] == plain


# --- the openai SDK ---------------------------------------------------------------------------


def test_sdk_float(sdk: openai.OpenAI, server: SimServer) -> None:
    reply = sdk.embeddings.create(
        model=server.model, input=["hello world", "more"], dimensions=6, encoding_format="float"
    )
    assert reply.object == "list"
    assert reply.model == server.model
    assert [d.index for d in reply.data] == [0, 1]
    assert reply.data[0].embedding == expected(HELLO_WORLD_IDS, 6)
    assert all(unit(d.embedding) for d in reply.data)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == 3


def test_sdk_default_asks_for_base64_and_decodes_it(sdk: openai.OpenAI) -> None:
    # Without encoding_format the SDK requests base64 and decodes it into floats itself.
    reply = sdk.embeddings.create(model="test-model", input=[[1, 2], [3]], dimensions=9)
    assert [d.embedding for d in reply.data] == [expected([1, 2], 9), expected([3], 9)]


def test_sdk_explicit_base64_is_returned_as_sent(sdk: openai.OpenAI) -> None:
    # With encoding_format="base64" the SDK leaves the string to the caller.
    reply = sdk.embeddings.create(
        model="test-model", input=HELLO_WORLD_IDS, dimensions=4, encoding_format="base64"
    )
    encoded: object = reply.data[0].embedding
    assert isinstance(encoded, str)
    decoded = list(struct.unpack("<4f", base64.b64decode(encoded)))
    assert decoded == expected(HELLO_WORLD_IDS, 4)


def test_sdk_default_dimensions(sdk: openai.OpenAI) -> None:
    reply = sdk.embeddings.create(model="test-model", input="hello world")
    assert reply.data[0].embedding == expected(HELLO_WORLD_IDS, 384)


def test_sdk_unknown_model(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.embeddings.create(model="nope", input="hi")
    assert unknown_model_message("nope", "test-model") in str(caught.value)


def test_sdk_bad_request(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.embeddings.create(model="test-model", input="hi", dimensions=0)
    assert "dimensions must be at least 1" in str(caught.value)


# --- model, config and headers ----------------------------------------------------------------


def test_unknown_model_is_404(http: httpx.Client) -> None:
    response = http.post(PATH, json={"model": "nope", "input": "hi"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["message"] == unknown_model_message("nope", "test-model")
    assert error["type"] == "NotFoundError"


def test_aliases_default_dimensions_and_headers(custom: SimServer) -> None:
    with httpx.Client(base_url=custom.url, timeout=30) as client:
        missing = client.post(PATH, json={"input": "hi"}, headers={"X-Request-Id": "emb-1"})
        assert missing.status_code == 200
        assert missing.json()["model"] == "alias-a"
        assert len(missing.json()["data"][0]["embedding"]) == 8
        assert missing.headers["x-request-id"] == "emb-1"
        assert missing.headers["x-inference-pod"] == "pod-1"
        assert missing.headers["x-inference-namespace"] == "ns-1"
        assert missing.headers["x-inference-port"] == str(custom.port)
        assert embed(client, {"model": "alias-b", "input": "hi"})["model"] == "alias-a"
        assert client.post(PATH, json={"model": "test-model", "input": "hi"}).status_code == 404
        failed = client.post(PATH, json={"input": ""}, headers={"X-Request-Id": "emb-2"})
        assert failed.status_code == 400
        assert "x-request-id" not in failed.headers
        assert "x-inference-pod" not in failed.headers


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({}, "input", INPUT_REQUIRED),
        ({"input": None}, "input", INPUT_REQUIRED),
        ({"input": []}, "input", INPUT_REQUIRED),
        ({"input": 7}, "input", INPUT_REQUIRED),
        ({"input": {"text": "a"}}, "input", INPUT_REQUIRED),
        ({"input": ""}, "input", EMPTY_STRING),
        ({"input": ["a", ""]}, "input[1]", EMPTY_STRING),
        ({"input": ["a", 1]}, "input[1]", INPUT_REQUIRED),
        ({"input": [1, "a"]}, "input[1]", "input[1] is a string"),
        ({"input": [[1], "a"]}, "input[1]", INPUT_REQUIRED),
        ({"input": [1, 2, -1]}, "input[2]", "input[2] is out of range"),
        ({"input": [TOKEN_ID_LIMIT]}, "input[0]", "input[0] is out of range"),
        ({"input": [1.5]}, "input[0]", "input[0] is a non-integer number"),
        ({"input": [1, 2.0]}, "input[1]", "input[1] is a non-integer number"),
        ({"input": [[1], [2, True]]}, "input[1][1]", "input[1][1] is a boolean"),
        ({"input": [[1], [2, -3]]}, "input[1][1]", "input[1][1] is out of range"),
        ({"input": [None]}, "input[0]", INPUT_REQUIRED),
        ({"input": "a", "dimensions": 0}, "dimensions", "dimensions must be at least 1"),
        ({"input": "a", "dimensions": -4}, "dimensions", "dimensions must be at least 1"),
        ({"input": "a", "dimensions": MAX_DIMENSIONS + 1}, "dimensions", "dimensions must be"),
        ({"input": "a", "dimensions": 2**80}, "dimensions", "dimensions must be at most"),
        ({"input": "a", "dimensions": "4"}, "body.dimensions", VALIDATION),
        ({"input": "a", "dimensions": 4.0}, "body.dimensions", VALIDATION),
        ({"input": "a", "dimensions": True}, "body.dimensions", VALIDATION),
        ({"input": "a", "encoding_format": "bytes"}, "encoding_format", "encoding_format must"),
        ({"input": "a", "encoding_format": "FLOAT"}, "encoding_format", "encoding_format must"),
        ({"input": "a", "encoding_format": ""}, "encoding_format", "encoding_format must"),
        ({"input": "a", "encoding_format": 1}, "body.encoding_format", VALIDATION),
        ({"input": "a", "model": 5}, "body.model", VALIDATION),
        ({"input": "a", "user": 5}, "body.user", VALIDATION),
        ({"input": [[1]] * 300, "dimensions": MAX_DIMENSIONS}, "input", "input has 300 items"),
    ],
)
def test_malformed_requests_are_400_naming_the_field(
    http: httpx.Client, body: dict[str, Any], param: str, message: str
) -> None:
    kind = VALIDATION_TYPE if message == VALIDATION else None  # the body's schema, as vLLM
    response = http.post(PATH, json=body)
    assert_openai_error(response, 400, param=param, prefix=message, error_type=kind)


def test_number_beyond_float_range_names_the_element(http: httpx.Client) -> None:
    content = b'{"input": [[1], [1e400]]}'  # valid JSON no float can hold
    response = http.post(PATH, content=content, headers={"content-type": "application/json"})
    assert_openai_error(response, 400, param="input[1][0]", prefix=PARSE_PREFIX)


def test_unknown_fields_are_ignored(http: httpx.Client) -> None:
    answer = embed(http, {"input": [1], "dimensions": 2, "user": "u", "truncate": 3, "x": [1]})
    assert answer["data"][0]["embedding"] == expected([1], 2)


# --- fuzz -------------------------------------------------------------------------------------

FUZZ = fuzz_settings(150, HealthCheck.function_scoped_fixture)
scalars = json_scalars(8)
values: st.SearchStrategy[Any] = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner)
)
token = st.integers(min_value=-3, max_value=TOKEN_ID_LIMIT + 3)
inputs = (
    values
    | st.text(max_size=20)
    | st.lists(st.text(max_size=6), max_size=4)
    | st.lists(token, max_size=6)
    | st.lists(st.lists(token, max_size=4), max_size=4)
)
wild = st.fixed_dictionaries(
    {},
    optional={
        "input": inputs,
        "dimensions": st.integers(min_value=-2, max_value=64) | values,
        "encoding_format": st.sampled_from(["float", "base64", "bytes", None]) | values,
        "model": st.sampled_from(["test-model", "other", None]) | values,
    },
)
# Mostly well-formed bodies, so that the fuzz reaches the vector code as often as the checks.
plausible = st.fixed_dictionaries(
    {"input": inputs},
    optional={
        "dimensions": st.integers(min_value=1, max_value=64),
        "encoding_format": st.sampled_from(["float", "base64"]),
        "model": st.just("test-model"),
    },
)
bodies = plausible | wild


@FUZZ
@given(body=bodies)
def test_fuzz_never_500(http: httpx.Client, body: dict[str, Any]) -> None:
    response = http.post(PATH, json=body)
    assert response.status_code in (200, 400, 404), response.text
    event(f"status {response.status_code}")
    answer = response.json()
    if response.status_code != 200:
        assert set(answer["error"]) == {"message", "type", "param", "code"}
        return
    for item in answer["data"]:
        vector = item["embedding"]
        if isinstance(vector, str):
            raw = base64.b64decode(vector)
            vector = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        assert unit(vector)
    assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"]


def test_server_still_answers_after_the_fuzz(http: httpx.Client) -> None:
    assert embed(http, {"input": "still here", "dimensions": 3})["data"][0]["index"] == 0
