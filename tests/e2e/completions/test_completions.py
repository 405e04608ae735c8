"""Non-streaming /v1/completions: envelope, prompt forms, usage, n, echo and random content."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.support.http import (
    COMPLETIONS,
    EOS_TOKENS,
    REQUEST_ID_RE,
    ascii_tokens,
    assert_completion_shape,
    is_bank_text,
    json_ok,
    post,
    usage,
)
from tests.support.server import SimServer


def _complete(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    return json_ok(post(client, COMPLETIONS, body))


def test_envelope(http: httpx.Client, sim: SimServer) -> None:
    before = int(time.time())
    reply = _complete(http, {"model": sim.model, "prompt": "Hello", "max_tokens": 5})
    after = int(time.time())
    assert_completion_shape(reply)
    assert reply["kv_transfer_params"] is None
    # vLLM's completion id: `cmpl-<request id>`, no per-prompt suffix.
    assert re.fullmatch(f"cmpl-{REQUEST_ID_RE}", reply["id"]), reply["id"]
    assert before <= reply["created"] <= after
    assert reply["model"] == sim.model
    [choice] = reply["choices"]
    assert choice["index"] == 0
    # A plain request asks for no logprobs, token ids or prompt logprobs.
    for key in ("logprobs", "stop_reason", "token_ids", "prompt_logprobs", "prompt_token_ids"):
        assert choice[key] is None, key
    assert isinstance(choice["text"], str)
    assert choice["finish_reason"] in ("stop", "length")


def test_one_id_for_all_prompts(http: httpx.Client) -> None:
    reply = _complete(http, {"prompt": ["a", "b", "c"], "max_tokens": 2, "n": 2})
    assert re.fullmatch(f"cmpl-{REQUEST_ID_RE}", reply["id"]), reply["id"]
    assert len(reply["choices"]) == 6


@pytest.mark.parametrize(
    ("prompt", "prompt_tokens"),
    [
        ("This is a test.", 5),
        ("Hello", 1),
        ([1, 2, 3, 4], 4),
        ([[1, 2, 3, 4]], 4),
        (["This is a test.", "Hello"], 6),
        ([[1, 2], [3, 4, 5]], 5),
    ],
)
def test_simulated_prompt_token_counts(
    echo_http: httpx.Client, prompt: object, prompt_tokens: int
) -> None:
    reply = _complete(echo_http, {"prompt": prompt})
    assert reply["usage"]["prompt_tokens"] == prompt_tokens


@pytest.mark.parametrize(
    "text",
    ["This is a test.", "héllo | wörld 🙂", "  two leading spaces", "a\nb\tc  ", "日本語"],
)
def test_echo_of_a_text_prompt_is_verbatim(echo_http: httpx.Client, text: str) -> None:
    reply = _complete(echo_http, {"prompt": text})
    [choice] = reply["choices"]
    assert choice["text"] == text
    assert choice["finish_reason"] == "stop"


def test_echo_of_token_id_prompts(echo_http: httpx.Client) -> None:
    reply = _complete(echo_http, {"prompt": [[1, 2, 3], [10, 20], [7]]})
    assert [c["text"] for c in reply["choices"]] == ["1,2,3", "10,20", "7"]
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "stop" for c in reply["choices"])
    assert reply["usage"] == usage(6, 6 + 3 * EOS_TOKENS)  # each choice ends with its EOS


def test_echo_of_a_flat_token_id_prompt(echo_http: httpx.Client) -> None:
    reply = _complete(echo_http, {"prompt": [1, 2, 3]})
    [choice] = reply["choices"]
    assert choice["text"] == "1,2,3"
    assert reply["usage"] == usage(3, 3 + EOS_TOKENS)


@pytest.mark.parametrize(("max_tokens", "finish"), [(1, "length"), (5, "length"), (6, "stop")])
def test_echo_max_tokens_only_sets_the_finish_reason(
    echo_http: httpx.Client, max_tokens: int, finish: str
) -> None:
    reply = _complete(echo_http, {"prompt": "This is a test.", "max_tokens": max_tokens})
    [choice] = reply["choices"]
    assert choice["text"] == "This is a test."
    assert choice["finish_reason"] == finish
    # Only a stop has its end-of-sequence token: a cut answer was still going.
    assert reply["usage"] == usage(5, 5 + (EOS_TOKENS if finish == "stop" else 0))


def test_two_prompts_times_n_three(echo_http: httpx.Client) -> None:
    prompts = ["This is a test.", "Hello world"]
    reply = _complete(echo_http, {"prompt": prompts, "n": 3})
    choices = reply["choices"]
    assert [c["index"] for c in choices] == list(range(6))
    for i, choice in enumerate(choices):
        assert choice["text"] == prompts[i // 3]
    # Prompt tokens once per prompt (5 + 2), completions summed over all six choices, each
    # with its end of sequence.
    assert reply["usage"] == usage(7, 3 * 5 + 3 * 2 + 6 * EOS_TOKENS)


def test_token_id_prompts_times_n(echo_http: httpx.Client) -> None:
    reply = _complete(echo_http, {"prompt": [[1, 2], [3]], "n": 2})
    assert [c["text"] for c in reply["choices"]] == ["1,2", "1,2", "3", "3"]
    assert reply["usage"] == usage(3, 6 + 4 * EOS_TOKENS)


# ------------------------------------------------------------------ random mode


def test_random_text_and_counts(http: httpx.Client) -> None:
    reply = _complete(http, {"prompt": "Hello", "max_tokens": 40, "n": 10})
    total = 0
    for choice in reply["choices"]:
        assert is_bank_text(choice["text"]), choice["text"]
        count = len(ascii_tokens(choice["text"]))
        assert 1 <= count <= 40
        stop = choice["finish_reason"] == "stop"
        assert (not stop) == (count == 40)
        total += count + (EOS_TOKENS if stop else 0)
    assert reply["usage"] == usage(1, total)


def test_random_max_tokens_one(http: httpx.Client) -> None:
    reply = _complete(http, {"prompt": [5, 6, 7], "max_tokens": 1})
    [choice] = reply["choices"]
    assert len(ascii_tokens(choice["text"])) == 1
    assert choice["finish_reason"] == "length"
    assert reply["usage"] == usage(3, 1)


def test_random_ignore_eos_gives_exactly_max_tokens(http: httpx.Client) -> None:
    reply = _complete(http, {"prompt": "Hello", "max_tokens": 50, "ignore_eos": True, "n": 2})
    for choice in reply["choices"]:
        assert len(ascii_tokens(choice["text"])) == 50
        assert choice["finish_reason"] == "length"
    assert reply["usage"] == usage(1, 100)


def test_random_multi_prompt_usage(http: httpx.Client) -> None:
    body = {"prompt": ["This is a test.", "Hello"], "max_tokens": 8, "n": 2}
    reply = _complete(http, body)
    total = sum(
        len(ascii_tokens(c["text"])) + (EOS_TOKENS if c["finish_reason"] == "stop" else 0)
        for c in reply["choices"]
    )
    assert reply["usage"] == usage(6, total)
