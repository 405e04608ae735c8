"""One request path: every generation endpoint checks the same things in the same order.

A body with two mistakes, a non-positive output limit and a malformed protocol part
(prompt, messages, input, tools), is refused for the output limit on every API: the shared
knobs are checked before the protocol plans prompts, tools and formats.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.errors import assert_anthropic_error, assert_openai_error
from tests.support.http import post

POSITIVE = "Max completion tokens and max tokens should be positive"
USER = [{"role": "user", "content": "hi"}]

TWO_MISTAKES: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 0, "tools": [{}]}, "max_tokens"),
    (
        "/v1/chat/completions",
        {"messages": USER, "max_completion_tokens": -1, "response_format": {"type": "x"}},
        "max_completion_tokens",
    ),
    ("/v1/completions", {"prompt": [], "max_tokens": 0}, "max_tokens"),
    (
        "/v1/responses",
        {"input": [{"type": "bogus"}], "max_output_tokens": 0},
        "max_output_tokens",
    ),
    (
        "/inference/v1/generate",
        {"token_ids": [1], "sampling_params": {"max_tokens": 0}},
        "sampling_params.max_tokens",
    ),
]


@pytest.mark.parametrize(("path", "body", "param"), TWO_MISTAKES)
def test_the_output_limit_is_checked_before_the_protocol_parts(
    http: httpx.Client, path: str, body: dict[str, Any], param: str
) -> None:
    assert_openai_error(post(http, path, body), 400, POSITIVE, param=param)


def test_messages_checks_the_output_limit_before_its_messages(http: httpx.Client) -> None:
    response = post(http, "/v1/messages", {"messages": [], "max_tokens": 0})
    assert_anthropic_error(response, 400, POSITIVE)


def test_the_model_is_resolved_before_the_body_is_planned(http: httpx.Client) -> None:
    for path, body, _ in TWO_MISTAKES:
        response = post(http, path, {**body, "model": "no-such-model"})
        assert_openai_error(response, 404, param="model")
