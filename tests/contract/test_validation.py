"""Request validation of /v1/chat/completions and /v1/completions: exact 400 texts and params."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.errors import (
    assert_openai_error,
    assert_validation_error,
    too_many_logprobs_message,
    unknown_model_message,
)
from tests.support.http import (
    CHAT,
    COMPLETIONS,
    PARSE_PREFIX,
    PROMPT_FORMS,
    chat_body,
    post,
)
from tests.support.server import SimServer

MAX_POSITIVE = "Max completion tokens and max tokens should be positive"
IGNORE_EOS = "Ignore_eos is true but max_completion_tokens (or max_tokens) is not set"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"stream": "true"}, "body.stream"),
        ({"stream": 1}, "body.stream"),
        ({"n": "2"}, "body.n"),
        ({"n": 1.5}, "body.n"),
        ({"max_tokens": "5"}, "body.max_tokens"),
        ({"max_completion_tokens": [5]}, "body.max_completion_tokens"),
        ({"ignore_eos": "yes"}, "body.ignore_eos"),
        ({"logprobs": 1}, "body.logprobs"),
        ({"top_logprobs": "2", "logprobs": True}, "body.top_logprobs"),
        ({"model": 5}, "body.model"),
        ({"stream_options": "on"}, "body.stream_options"),
        ({"stream_options": {"include_usage": "yes"}}, "body.stream_options.include_usage"),
        ({"messages": "Hello"}, "body.messages"),
        ({"messages": {"role": "user"}}, "body.messages"),
        ({"messages": [5]}, "body.messages.0"),
        ({"messages": [{"role": "user", "content": 5}]}, "body.messages.0.content"),
        ({"messages": [{"role": "user", "content": True}]}, "body.messages.0.content"),
        ({"messages": [{"role": 7, "content": "x"}]}, "body.messages.0.role"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": {}}]},
            "body.messages.1.content",
        ),
    ],
)
def test_chat_wrong_types_name_the_field(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    request = {**chat_body(), **body}
    assert_validation_error(post(http, CHAT, request), param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"stream": "false"}, "body.stream"),
        ({"n": "1"}, "body.n"),
        ({"max_tokens": 2.5}, "body.max_tokens"),
        ({"ignore_eos": 0}, "body.ignore_eos"),
        ({"logprobs": True}, "body.logprobs"),
        ({"logprobs": "2"}, "body.logprobs"),
        ({"model": ["m"]}, "body.model"),
        ({"stream_options": {"include_usage": 1}}, "body.stream_options.include_usage"),
    ],
)
def test_completions_wrong_types_name_the_field(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    request = {"prompt": "Hello", **body}
    assert_validation_error(post(http, COMPLETIONS, request), param)


def test_a_wrong_type_is_worded_as_vllm_0_32(http: httpx.Client) -> None:
    response = post(http, CHAT, {**chat_body(), "n": "x"})
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.n', 'msg': "
            "'Input should be a valid integer, unable to parse string as an integer', "
            "'input': 'x'}",
            "type": "Bad Request",
            "param": "body.n",
            "code": 400,
        }
    }


def test_messages_is_required(http: httpx.Client, sim: SimServer) -> None:
    error = assert_validation_error(post(http, CHAT, {"model": sim.model}), "body.messages")
    assert error["message"] == (
        "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', "
        "'msg': 'Field required', 'input': '<dict of 1 items>'}"
    )


def test_unknown_fields_are_ignored(http: httpx.Client) -> None:
    body = chat_body(max_tokens=2, temperature=0.2, seed=3, stop=["x"], whatever={"a": [1]})
    assert post(http, CHAT, body).status_code == 200
    body = {"prompt": "Hi", "max_tokens": 2, "echo": True, "best_of": 2, "zzz": 1}
    assert post(http, COMPLETIONS, body).status_code == 200


# ------------------------------------------------------------- null is absent


@pytest.mark.parametrize(
    "field",
    [
        "model",
        "stream",
        "stream_options",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
    ],
)
def test_chat_null_field_means_absent(http: httpx.Client, field: str) -> None:
    """A null field counts as absent, as in vLLM (where these fields are Optional)."""
    response = post(http, CHAT, {**chat_body(), field: None})
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["object"] == "chat.completion"
    assert len(reply["choices"]) == 1
    assert reply["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("field", ["model", "stream", "stream_options", "max_tokens", "logprobs"])
def test_completions_null_field_means_absent(http: httpx.Client, field: str) -> None:
    response = post(http, COMPLETIONS, {"prompt": "Hello", field: None})
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["object"] == "text_completion"
    assert reply["choices"][0]["logprobs"] is None


# ------------------------------------------------------------ common validation


@pytest.mark.parametrize("n", [0, -1, -100])
def test_chat_n_below_one(http: httpx.Client, n: int) -> None:
    assert_openai_error(post(http, CHAT, chat_body(n=n)), 400, "n must be at least 1")


@pytest.mark.parametrize("n", [0, -3])
def test_completions_n_below_one(http: httpx.Client, n: int) -> None:
    body = {"prompt": "Hello", "n": n}
    assert_openai_error(post(http, COMPLETIONS, body), 400, "n must be at least 1")


def test_omitted_n_gives_one_choice(http: httpx.Client) -> None:
    assert len(post(http, CHAT, chat_body(max_tokens=3)).json()["choices"]) == 1
    body = {"prompt": "Hello", "max_tokens": 3}
    assert len(post(http, COMPLETIONS, body).json()["choices"]) == 1


@pytest.mark.parametrize(
    "extra",
    [
        {"max_tokens": 0},
        {"max_tokens": -1},
        {"max_completion_tokens": 0},
        {"max_completion_tokens": -5, "max_tokens": 10},
    ],
)
def test_chat_max_tokens_must_be_positive(http: httpx.Client, extra: dict[str, int]) -> None:
    assert_openai_error(post(http, CHAT, {**chat_body(), **extra}), 400, MAX_POSITIVE)


def test_chat_only_effective_max_tokens_is_validated(http: httpx.Client) -> None:
    """max_completion_tokens wins over max_tokens, so max_tokens -1 is never looked at."""
    response = post(http, CHAT, chat_body(max_tokens=-1, max_completion_tokens=3))
    assert response.status_code == 200, response.text
    reply = response.json()
    assert 1 <= reply["usage"]["completion_tokens"] <= 3


def test_chat_max_completion_tokens_limits_over_max_tokens(http: httpx.Client) -> None:
    body = chat_body(max_tokens=500, max_completion_tokens=4, ignore_eos=True)
    reply = post(http, CHAT, body).json()
    assert reply["usage"]["completion_tokens"] == 4
    assert reply["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("max_tokens", [0, -7])
def test_completions_max_tokens_must_be_positive(http: httpx.Client, max_tokens: int) -> None:
    body = {"prompt": "Hello", "max_tokens": max_tokens}
    assert_openai_error(post(http, COMPLETIONS, body), 400, MAX_POSITIVE)


def test_completions_ignore_max_completion_tokens(http: httpx.Client) -> None:
    """max_tokens is the completions limit; max_completion_tokens is not read there."""
    body = {"prompt": "Hello", "max_tokens": 3, "max_completion_tokens": -1}
    assert post(http, COMPLETIONS, body).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_ignore_eos_needs_max_tokens(http: httpx.Client, stream: bool) -> None:
    """Chat has no default max_tokens, so ignore_eos alone is refused; a completion always
    has one (vLLM's 16), so it runs to exactly that."""
    assert_openai_error(
        post(http, CHAT, chat_body(ignore_eos=True, stream=stream)), 400, IGNORE_EOS
    )
    body = {"prompt": "Hello", "ignore_eos": True, "stream": stream}
    response = post(http, COMPLETIONS, body)
    assert response.status_code == 200, response.text
    if stream:
        assert response.text.count('"finish_reason":null') == 15
        assert response.text.count('"finish_reason":"length"') == 1
    else:
        [choice] = response.json()["choices"]
        assert choice["finish_reason"] == "length"
        assert response.json()["usage"]["completion_tokens"] == 16


def test_validation_order_n_before_max_tokens(http: httpx.Client) -> None:
    body = chat_body(n=0, max_tokens=0, ignore_eos=True)
    assert_openai_error(post(http, CHAT, body), 400, "n must be at least 1")


# ---------------------------------------------------------------- logprob limits


def test_chat_top_logprobs_over_20_is_400(http: httpx.Client) -> None:
    # vLLM 0.32 refuses it where it checks the sampling params, which name it `logprobs`.
    body = chat_body(logprobs=True, top_logprobs=21, max_tokens=2)
    message = too_many_logprobs_message(21)
    assert_openai_error(post(http, CHAT, body), 400, message, param="logprobs")
    body = chat_body(logprobs=True, top_logprobs=20, max_tokens=2)
    assert post(http, CHAT, body).status_code == 200


@pytest.mark.parametrize("logprobs", [False, "absent"])
def test_chat_top_logprobs_without_logprobs_is_400(http: httpx.Client, logprobs: object) -> None:
    body = chat_body(top_logprobs=2, max_tokens=2)
    if logprobs != "absent":
        body["logprobs"] = logprobs
    assert_openai_error(post(http, CHAT, body), 400, param="top_logprobs")


def test_chat_negative_top_logprobs_is_400(http: httpx.Client) -> None:
    body = chat_body(logprobs=True, top_logprobs=-1, max_tokens=2)
    assert_openai_error(post(http, CHAT, body), 400, param="top_logprobs")


def test_completions_logprobs_over_20_is_400(http: httpx.Client) -> None:
    body = {"prompt": "Hello", "max_tokens": 2, "logprobs": 21}
    message = too_many_logprobs_message(21)
    assert_openai_error(post(http, COMPLETIONS, body), 400, message, param="logprobs")


# ------------------------------------------------------------ completions prompt


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "prompt array must contain at least one prompt"),
        ({"prompt": None}, "prompt array must contain at least one prompt"),
        ({"prompt": []}, "prompt array must contain at least one prompt"),
        ({"prompt": ""}, "prompt must not contain an empty string"),
        ({"prompt": ["a", ""]}, "prompt must not contain an empty string"),
        ({"prompt": [""]}, "prompt must not contain an empty string"),
        ({"prompt": [[1], []]}, "prompt must not contain an empty token-id array"),
        ({"prompt": [[]]}, "prompt must not contain an empty token-id array"),
    ],
)
def test_completions_prompt_rules(http: httpx.Client, body: dict[str, Any], message: str) -> None:
    assert_openai_error(post(http, COMPLETIONS, {"max_tokens": 2, **body}), 400, message)


BAD_PROMPTS = [
    123,
    ["a", [1]],
    [1, "a"],
    [[1], "a"],
    {"text": "a"},
    True,
    1.5,
    [-1],
    [1.5],
    [2**32],
    [[1, -2]],
]


@pytest.mark.parametrize("prompt", BAD_PROMPTS)
def test_completions_bad_prompt_shape_names_the_four_forms(
    http: httpx.Client, prompt: object
) -> None:
    response = post(http, COMPLETIONS, {"prompt": prompt, "max_tokens": 2})
    assert_openai_error(response, 400, contains=PROMPT_FORMS, param="prompt")


@pytest.mark.parametrize("prompt", [123, ["a", [1]]])
def test_completions_bad_prompt_shape_is_a_parse_error(http: httpx.Client, prompt: object) -> None:
    """A prompt of none of the four forms is a body type error like any other, so the
    message carries the parse-error prefix."""
    response = post(http, COMPLETIONS, {"prompt": prompt, "max_tokens": 2})
    assert_openai_error(response, 400, prefix=PARSE_PREFIX + PROMPT_FORMS)


@pytest.mark.parametrize("prompt", [[0], [2**32 - 1], [[0, 2**32 - 1], [5]]])
def test_completions_token_id_bounds_are_uint32(http: httpx.Client, prompt: object) -> None:
    response = post(http, COMPLETIONS, {"prompt": prompt, "max_tokens": 2})
    assert response.status_code == 200, response.text


def test_model_check_comes_before_prompt_validation(http: httpx.Client, sim: SimServer) -> None:
    body = {"model": "nope", "prompt": []}
    message = unknown_model_message("nope", sim.model)
    assert_openai_error(post(http, COMPLETIONS, body), 404, message)


def test_missing_model_is_served_by_default_model(http: httpx.Client, sim: SimServer) -> None:
    reply = post(http, CHAT, chat_body(max_tokens=2)).json()
    assert reply["model"] == sim.model
    reply = post(http, COMPLETIONS, {"prompt": "Hi", "max_tokens": 2}).json()
    assert reply["model"] == sim.model
    reply = post(http, CHAT, chat_body(max_tokens=2, model="")).json()
    assert reply["model"] == sim.model


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("stream", [False, True])
def test_unknown_model_is_404(http: httpx.Client, sim: SimServer, path: str, stream: bool) -> None:
    body = {**chat_body(), "prompt": "Hi", "model": "x", "stream": stream}
    message = unknown_model_message("x", sim.model)
    assert_openai_error(post(http, path, body), 404, message, param="model")


def test_model_names_match_exactly(http: httpx.Client, sim: SimServer) -> None:
    for name in (sim.model.upper(), sim.model + " ", " " + sim.model):
        body = chat_body(model=name)
        message = unknown_model_message(name, sim.model)
        assert_openai_error(post(http, CHAT, body), 404, message)
