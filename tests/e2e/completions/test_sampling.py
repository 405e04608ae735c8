"""vLLM's sampling parameters on /v1/completions, through a real server: vLLM-only fields
are accepted, wrong types and out-of-range values are 400s naming the field, `suffix` is
refused as by a model without fill-in-the-middle rendering."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.errors import assert_openai_error, assert_validation_error
from tests.support.fixtures import openai_fixture
from tests.support.http import COMPLETIONS, json_ok, post
from tests.support.server import SimServer

client = openai_fixture("sim")


def _body(**fields: Any) -> dict[str, Any]:
    return {"prompt": "Hello", "max_tokens": 3, **fields}


def test_vllm_and_openai_sampling_fields_are_accepted(http: httpx.Client) -> None:
    body = _body(
        temperature=1.5,
        top_p=0.5,
        top_k=-1,
        min_p=0,
        presence_penalty=2,
        frequency_penalty=-2,
        repetition_penalty=0.5,
        seed=2**63 - 1,
        stop="\n",
        stop_token_ids=[1],
        bad_words=["x"],
        min_tokens=3,
        skip_special_tokens=False,
        include_stop_str_in_output=True,
        logit_bias={"7": 3.5},
        allowed_token_ids=[4, 5],
        add_special_tokens=False,
        echo=False,
        user="u",
        truncate_prompt_tokens=-1,
        structured_outputs={"regex": "[0-9]+"},
        vllm_xargs={"a": 1.5},
    )
    assert json_ok(post(http, COMPLETIONS, body))["object"] == "text_completion"


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("temperature", "hot", "float_parsing"),
        ("min_p", True, "float_type"),
        ("repetition_penalty", [1], "float_type"),
        ("stop_token_ids", "1", "list_type"),
        ("echo", "yes", "bool_parsing"),
        ("logit_bias", {"1": "x"}, "float_type"),  # msgspec names no key: the map is located
        ("suffix", 5, "string_type"),
        ("add_special_tokens", None, "bool_type"),
    ],
)
def test_a_wrong_type_is_a_400_naming_the_field(
    http: httpx.Client, field: str, value: object, kind: str
) -> None:
    # vLLM 0.32's validation error: pydantic's error type, located under `body`.
    response = post(http, COMPLETIONS, _body(**{field: value}))
    assert_validation_error(response, f"body.{field}", kind)


@pytest.mark.parametrize(
    ("fields", "message", "param"),
    [
        (
            {"temperature": 2.01},
            "temperature must be in [0, 2], got 2.01. (parameter=temperature, value=2.01)",
            "temperature",
        ),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)", "top_p"),
        ({"min_p": -0.1}, "min_p must be in [0, 1], got -0.1.", "min_p"),
        (
            {"min_tokens": -1},
            "min_tokens must be greater than or equal to 0, got -1.",
            "min_tokens",
        ),
        ({"temperature": 0.0, "n": 4}, "n must be 1 when using greedy sampling, got 4.", "n"),
        (
            {"logit_bias": {"abc": 1}},
            "logit_bias contains key(s) that cannot be converted to integer token IDs: ['abc'] "
            "(parameter=logit_bias, value=['abc'])",
            "logit_bias",
        ),
        (
            {"suffix": "world"},
            "suffix is only supported for models with FIM completion rendering",
            "suffix",
        ),
        (
            {"stream_options": {"include_usage": False}, "stream": False},
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
            "stream_options",
        ),
        (
            {"prompt_logprobs": 1, "stream": True},
            "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
            "prompt_logprobs",
        ),
    ],
)
def test_an_out_of_range_value_is_vllms_400(
    http: httpx.Client, fields: dict[str, Any], message: str, param: str
) -> None:
    assert_openai_error(post(http, COMPLETIONS, _body(**fields)), 400, message, param=param)


def test_empty_stream_options_without_stream_are_accepted(http: httpx.Client) -> None:
    json_ok(post(http, COMPLETIONS, _body(stream_options={})))
    json_ok(post(http, COMPLETIONS, _body(stream_options=None)))


def test_sdk_extra_body(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.completions.create(
        model=sim.model,
        prompt="Hello",
        max_tokens=3,
        temperature=0.3,
        extra_body={"top_k": 10, "min_p": 0.2, "repetition_penalty": 1.3, "stop_token_ids": [9]},
    )
    assert reply.object == "text_completion"
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(
            model=sim.model, prompt="Hello", max_tokens=3, extra_body={"min_p": 2}
        )
    assert caught.value.param == "min_p"
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=sim.model, prompt="Hello", max_tokens=3, suffix="!")
    assert caught.value.param == "suffix"
