"""One embeddings request cannot make the server build hundreds of megabytes."""

from __future__ import annotations

import httpx

from tests.support.errors import assert_openai_error
from tests.support.http import post
from vllm_sim.protocols.openai.embeddings import MAX_DIMENSIONS, MAX_VALUES


def test_256_inputs_of_65536_dimensions_are_refused_before_any_vector(http: httpx.Client) -> None:
    body = {"input": [[1, 2]] * 256, "dimensions": MAX_DIMENSIONS}
    response = post(http, "/v1/embeddings", body)
    message = f"input has 256 items of 65536 dimensions, more than the {MAX_VALUES} values"
    assert_openai_error(response, 400, param="input", contains=message)
    assert MAX_VALUES == 2**20


def test_the_largest_allowed_answer_is_served(http: httpx.Client) -> None:
    count = MAX_VALUES // MAX_DIMENSIONS
    body = {"input": [[1, 2]] * count, "dimensions": MAX_DIMENSIONS, "encoding_format": "base64"}
    answer = post(http, "/v1/embeddings", body)
    assert answer.status_code == 200
    assert len(answer.json()["data"]) == count
