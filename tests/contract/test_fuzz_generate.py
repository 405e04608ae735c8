"""Malformed /inference/v1/generate and LoRA bodies: never a 5xx, always a JSON error envelope
for a 4xx, and the server keeps answering afterwards."""

from __future__ import annotations

from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.fuzz import fuzz_settings, json_scalars, json_trees
from tests.support.http import post
from tests.support.native import GENERATE, LOAD, UNLOAD, gen_body

FUZZ = fuzz_settings(150)

scalars = json_scalars(10, st.sampled_from([0, 1, -1, 2**32 - 1, 2**32, 2**63, 2**64]))
json_values = json_trees(scalars)

GENERATE_KEYS = [
    "token_ids",
    "sampling_params",
    "model",
    "stream",
    "stream_options",
    "ignore_eos",
    "kv_transfer_params",
    "features",
]
sampling_params = st.fixed_dictionaries(
    {},
    optional={
        "max_tokens": json_values,
        "extra_args": json_values | st.fixed_dictionaries({"kv_transfer_params": json_values}),
    },
)
generate_bodies = st.fixed_dictionaries(
    {},
    optional={
        "token_ids": json_values | st.lists(scalars, max_size=6),
        "sampling_params": sampling_params | json_values,
        "model": json_values,
        "stream": json_values,
        "stream_options": json_values | st.fixed_dictionaries({"include_usage": json_values}),
        "ignore_eos": json_values,
        "kv_transfer_params": json_values
        | st.dictionaries(
            st.sampled_from(["do_remote_decode", "do_remote_prefill", "remote_block_ids"]),
            json_values,
        ),
        "features": json_values
        | st.fixed_dictionaries(
            {"mm_hashes": json_values | st.dictionaries(st.text(), json_values)}
        ),
    },
)
lora_bodies = st.fixed_dictionaries(
    {},
    optional={"lora_name": json_values, "lora_path": json_values, "lora_int_id": json_values},
)


_fuzzed = server_fixture(["--max-num-seqs", "16", "--max-loras", "2"])
client = http_fixture("_fuzzed")


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        assert_openai_error(response)


def alive(client: httpx.Client) -> None:
    answer = client.post(GENERATE, json=gen_body([1, 2, 3], 2))
    assert answer.status_code == 200, answer.text


@FUZZ
@given(body=generate_bodies)
def test_generate_bodies_never_5xx(client: httpx.Client, body: dict[str, Any]) -> None:
    check(post(client, GENERATE, body))


@FUZZ
@given(body=lora_bodies, unload=st.booleans())
def test_lora_bodies_never_5xx(client: httpx.Client, body: dict[str, Any], unload: bool) -> None:
    check(post(client, UNLOAD if unload else LOAD, body))


@FUZZ
@given(
    raw=st.binary(max_size=40)
    | st.sampled_from([b"", b"{", b"[]", b"null", b'"x"', b"1e999", b'{"token_ids":[1,]}']),
    path=st.sampled_from([GENERATE, LOAD, UNLOAD]),
)
def test_junk_bytes_never_5xx(client: httpx.Client, raw: bytes, path: str) -> None:
    check(client.post(path, content=raw, headers={"content-type": "application/json"}))


def test_the_server_still_serves_after_the_fuzz(client: httpx.Client) -> None:
    alive(client)
    body = {"lora_name": "after-fuzz", "lora_path": "/p"}
    assert client.post(LOAD, json=body).status_code == 200
    answer = client.post(GENERATE, json=gen_body([1, 2], 2, model="after-fuzz"))
    assert answer.status_code == 200, answer.text
