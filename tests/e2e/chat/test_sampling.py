"""vLLM's sampling parameters on /v1/chat/completions, through a real server: vLLM-only
fields are accepted, wrong types and out-of-range values are 400s naming the field."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.errors import assert_openai_error, assert_validation_error
from tests.support.fixtures import openai_fixture
from tests.support.http import CHAT, PARSE_PREFIX, chat_body, json_ok, post
from tests.support.server import SimServer

client = openai_fixture("sim")

VLLM_FIELDS: dict[str, Any] = {
    "top_k": 40,
    "min_p": 0.05,
    "repetition_penalty": 1.2,
    "stop_token_ids": [13, 42],
    "skip_special_tokens": False,
    "chat_template_kwargs": {"enable_thinking": False},
    "min_tokens": 1,
    "bad_words": ["never"],
    "include_stop_str_in_output": True,
    "spaces_between_special_tokens": False,
    "logit_bias": {"50256": -100},
    "allowed_token_ids": [1, 2, 3],
    "prompt_logprobs": 2,
    "echo": False,
    "add_generation_prompt": True,
    "documents": [{"title": "a", "text": "b"}],
    "mm_processor_kwargs": {"fps": 1},
    "structured_outputs": {"choice": ["yes", "no"]},
    "priority": 0,
    "request_id": "mine",
    "cache_salt": "salt",
    "vllm_xargs": {"k": [1, "v"]},
    "reasoning_effort": "low",
    "truncate_prompt_tokens": 100,
    "return_token_ids": True,
}
OPENAI_FIELDS: dict[str, Any] = {
    "temperature": 0.8,
    "top_p": 0.95,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "seed": 7,
    "stop": ["\n\n", "END"],
    "user": "someone",
    "parallel_tool_calls": False,
}


def test_vllm_and_openai_sampling_fields_are_accepted(http: httpx.Client) -> None:
    body = chat_body(max_tokens=3, **OPENAI_FIELDS, **VLLM_FIELDS)
    reply = json_ok(post(http, CHAT, body))
    assert reply["object"] == "chat.completion"


def test_streamed_with_sampling_fields(http: httpx.Client) -> None:
    body = chat_body(max_tokens=3, stream=True, stream_options={"include_usage": True})
    response = post(http, CHAT, {**body, **OPENAI_FIELDS, "top_k": 5, "min_p": 0.1})
    assert response.status_code == 200, response.text
    assert response.text.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize(
    ("field", "value", "param", "kind"),
    [
        ("temperature", "hot", "body.temperature", "float_parsing"),
        ("top_p", "high", "body.top_p", "float_parsing"),
        ("top_k", 2.5, "body.top_k", "int_from_float"),
        ("seed", "x", "body.seed", "int_parsing"),
        ("stop", {"a": 1}, "body.stop", "string_type"),
        ("stop_token_ids", [1, "2"], "body.stop_token_ids.1", "int_parsing"),
        ("skip_special_tokens", "no", "body.skip_special_tokens", "bool_parsing"),
        ("chat_template_kwargs", "x", "body.chat_template_kwargs", "dict_type"),
        ("min_tokens", None, "body.min_tokens", "int_type"),
        ("reasoning_effort", "extreme", "body.reasoning_effort", "literal_error"),
    ],
)
def test_a_wrong_type_is_vllms_validation_error(
    http: httpx.Client, field: str, value: object, param: str, kind: str
) -> None:
    """vLLM's schema refuses a wrong type: its validation error, located in the body."""
    response = post(http, CHAT, {**chat_body(max_tokens=2), field: value})
    assert_validation_error(response, param, kind)


def test_too_many_stops_is_a_400_naming_the_field(http: httpx.Client) -> None:
    """Refused while the body is parsed (at most 4 stop strings), naming the bare field."""
    response = post(http, CHAT, {**chat_body(max_tokens=2), "stop": ["a", "b", "c", "d", "e"]})
    assert_openai_error(response, 400, prefix=PARSE_PREFIX, param="stop")


@pytest.mark.parametrize(
    ("fields", "message", "param"),
    [
        (
            {"temperature": -1},
            "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
            "temperature",
        ),
        (
            {"temperature": 2.5},
            "temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)",
            "temperature",
        ),
        ({"top_p": 0}, "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p"),
        ({"top_k": -5}, "top_k must be 0 (disable), or at least 1, got -5.", "top_k"),
        ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5.", "min_p"),
        (
            {"presence_penalty": 2.1},
            "presence_penalty must be in [-2, 2], got 2.1.",
            "presence_penalty",
        ),
        (
            {"frequency_penalty": -3},
            "frequency_penalty must be in [-2, 2], got -3.0.",
            "frequency_penalty",
        ),
        (
            {"repetition_penalty": 0},
            "repetition_penalty must be greater than zero, got 0.0.",
            "repetition_penalty",
        ),
        (
            {"min_tokens": 5, "max_tokens": 2},
            "min_tokens must be less than or equal to max_tokens=2, got 5.",
            "min_tokens",
        ),
        ({"temperature": 0, "n": 2}, "n must be 1 when using greedy sampling, got 2.", "n"),
        ({"stop": ""}, "stop cannot contain an empty string.", "stop"),
        (
            {"prompt_logprobs": 21},
            "Requested prompt logprobs of 21, which is greater than max allowed: 20 "
            "(parameter=prompt_logprobs, value=21)",
            "prompt_logprobs",
        ),
        (
            {"stream_options": {"include_usage": True}},
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
            "stream_options",
        ),
        (
            {"continue_final_message": True},
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            "continue_final_message",
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_an_out_of_range_value_is_vllms_400(
    http: httpx.Client, fields: dict[str, Any], message: str, param: str, stream: bool
) -> None:
    body = {**chat_body(max_tokens=3), **fields}
    if stream and not {"stream_options", "prompt_logprobs"} & set(fields):
        body["stream"] = True  # a streamed request gets the same JSON 400
    assert_openai_error(post(http, CHAT, body), 400, message, param=param)


def test_sdk_extra_body_reaches_the_server(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.chat.completions.create(
        model=sim.model,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=3,
        temperature=0.5,
        top_p=0.9,
        seed=1,
        stop=["."],
        extra_body={
            "top_k": 20,
            "min_p": 0.1,
            "repetition_penalty": 1.05,
            "stop_token_ids": [2],
            "skip_special_tokens": True,
            "chat_template_kwargs": {"enable_thinking": True},
        },
    )
    assert reply.choices[0].message.role == "assistant"


def test_sdk_sees_a_bad_request_naming_the_field(client: openai.OpenAI, sim: SimServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=sim.model,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=3,
            extra_body={"top_k": -3},
        )
    assert caught.value.status_code == 400
    assert caught.value.param == "top_k"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=sim.model,
            messages=[{"role": "user", "content": "Hi"}],
            temperature=3,
        )
    assert caught.value.param == "temperature"
