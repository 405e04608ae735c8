"""Non-streaming /v1/chat/completions: envelope, usage, n, echo and random content."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.support.http import (
    CHAT,
    EOS_TOKENS,
    REQUEST_ID_RE,
    ascii_tokens,
    assert_chat_shape,
    chat_body,
    is_bank_text,
    json_ok,
    post,
    usage,
)
from tests.support.server import SimServer


def _chat(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    return json_ok(post(client, CHAT, body))


def test_envelope(http: httpx.Client, sim: SimServer) -> None:
    before = int(time.time())
    reply = _chat(http, chat_body("Hello", model=sim.model, max_tokens=5))
    after = int(time.time())
    assert_chat_shape(reply)
    assert re.fullmatch(f"chatcmpl-{REQUEST_ID_RE}", reply["id"]), reply["id"]
    # A plain request asks for none of these: vLLM sends them null.
    for key in ("prompt_logprobs", "prompt_token_ids", "kv_transfer_params"):
        assert reply[key] is None, key
    assert before <= reply["created"] <= after
    assert type(reply["created"]) is int
    assert reply["model"] == sim.model
    [choice] = reply["choices"]
    assert choice["index"] == 0
    assert choice["logprobs"] is None
    assert choice["finish_reason"] in ("stop", "length")
    assert choice["stop_reason"] is None
    assert choice["token_ids"] is None
    assert isinstance(choice["message"]["content"], str)
    assert "tool_calls" not in choice["message"], "vLLM sends no tool_calls key without calls"


def test_ids_are_unique_per_request(http: httpx.Client) -> None:
    ids = {_chat(http, chat_body(max_tokens=1))["id"] for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize(
    ("messages", "prompt_tokens"),
    [
        ([{"role": "user", "content": "Hello"}], 6),
        ([{"role": "user", "content": "This is a test."}], 10),
        # `### system: Be brief.\n### user: Hello\n`
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], 14),
        # `### user: \n` - an empty message still renders its prefix.
        ([{"role": "user", "content": ""}], 5),
        ([{"role": "user", "content": None}], 5),
        ([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], 6),
    ],
)
def test_simulated_prompt_token_counts(
    echo_http: httpx.Client, messages: list[dict[str, Any]], prompt_tokens: int
) -> None:
    reply = _chat(echo_http, {"messages": messages})
    assert reply["usage"]["prompt_tokens"] == prompt_tokens


def test_usage_shape_and_totals(echo_http: httpx.Client) -> None:
    reply = _chat(echo_http, chat_body("This is a test."))
    # Echo: `This ` `is ` `a ` `test` `.` = 5 tokens, then the end of sequence.
    assert reply["usage"] == usage(10, 5 + EOS_TOKENS)


# ---------------------------------------------------------------------- echo


@pytest.mark.parametrize(
    "text",
    [
        "Hello",
        "This is a test.",
        "héllo | wörld 🙂",
        "   leading spaces and trailing   ",
        "\ttabs\tand\nnewlines\n",
        "`back`ticks` and | pipes ||",
        "日本語のテキスト",
        "quotes \"double\" and 'single' \\ backslash",
        "emoji 👩‍👩‍👧 and combining é",
    ],
)
def test_echo_returns_the_last_message_verbatim(echo_http: httpx.Client, text: str) -> None:
    reply = _chat(echo_http, chat_body(text))
    [choice] = reply["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == text
    assert choice["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] >= 1 + EOS_TOKENS


def test_echo_uses_the_last_message_whatever_its_role(echo_http: httpx.Client) -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "the last one"},
    ]
    reply = _chat(echo_http, {"messages": messages})
    assert reply["choices"][0]["message"]["content"] == "the last one"


def test_echo_of_text_and_image_blocks(echo_http: httpx.Client) -> None:
    url = "http://example.com/a.png"
    content = [
        {"type": "text", "text": "Describe this"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    reply = _chat(echo_http, {"messages": [{"role": "user", "content": content}]})
    assert reply["choices"][0]["message"]["content"] == f"Describe this\nimage: {url}"


def test_echo_of_an_empty_message(echo_http: httpx.Client) -> None:
    reply = _chat(echo_http, chat_body(""))
    [choice] = reply["choices"]
    assert choice["message"]["content"] == ""
    assert choice["finish_reason"] == "stop"
    assert reply["usage"] == usage(5, EOS_TOKENS)  # nothing to say, but still an end


@pytest.mark.parametrize(
    ("max_tokens", "finish"),
    [(1, "length"), (4, "length"), (5, "length"), (6, "stop"), (100, "stop")],
)
def test_echo_max_tokens_only_sets_the_finish_reason(
    echo_http: httpx.Client, max_tokens: int, finish: str
) -> None:
    """The echo (5 tokens) is never truncated; `length` when it reaches max tokens, else
    a stop with its end-of-sequence token (which fits, as max_tokens > 5)."""
    reply = _chat(echo_http, chat_body("This is a test.", max_tokens=max_tokens))
    [choice] = reply["choices"]
    assert choice["message"]["content"] == "This is a test."
    assert choice["finish_reason"] == finish
    eos = EOS_TOKENS if finish == "stop" else 0
    assert reply["usage"]["completion_tokens"] == 5 + eos


def test_echo_max_completion_tokens_sets_the_finish_reason(echo_http: httpx.Client) -> None:
    reply = _chat(echo_http, chat_body("This is a test.", max_completion_tokens=2))
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["choices"][0]["message"]["content"] == "This is a test."


def test_echo_ignore_eos_does_not_change_content(echo_http: httpx.Client) -> None:
    reply = _chat(echo_http, chat_body("Hello there", max_tokens=50, ignore_eos=True))
    assert reply["choices"][0]["message"]["content"] == "Hello there"


# ------------------------------------------------------------------------ n


def test_echo_n_choices_share_prompt_and_id(echo_http: httpx.Client) -> None:
    reply = _chat(echo_http, chat_body("This is a test.", n=3))
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == "This is a test." for c in reply["choices"])
    assert reply["usage"] == usage(10, 3 * (5 + EOS_TOKENS))


def test_random_n_choices(http: httpx.Client) -> None:
    reply = _chat(http, chat_body("Hello", n=4, max_tokens=30))
    choices = reply["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    total = 0
    for choice in choices:
        content = choice["message"]["content"]
        assert is_bank_text(content), content
        eos = EOS_TOKENS if choice["finish_reason"] == "stop" else 0
        total += len(ascii_tokens(content)) + eos
    assert reply["usage"] == usage(6, total)


# ------------------------------------------------------------------ random mode


def test_random_text_is_bank_sentences_and_counts_match(http: httpx.Client) -> None:
    for _ in range(10):
        reply = _chat(http, chat_body("Hello", max_tokens=60))
        [choice] = reply["choices"]
        content = choice["message"]["content"]
        assert is_bank_text(content), content
        tokens = ascii_tokens(content)
        length = choice["finish_reason"] == "length"
        # A natural stop also counts its end-of-sequence token, within max_tokens.
        assert len(tokens) + (0 if length else EOS_TOKENS) == reply["usage"]["completion_tokens"]
        assert 1 <= reply["usage"]["completion_tokens"] <= 60
        assert length == (len(tokens) == 60)


def test_random_max_tokens_one(http: httpx.Client) -> None:
    reply = _chat(http, chat_body("Hello", max_tokens=1, n=5))
    for choice in reply["choices"]:
        assert len(ascii_tokens(choice["message"]["content"])) == 1
        assert choice["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_random_ignore_eos_gives_exactly_max_tokens(http: httpx.Client, field: str) -> None:
    reply = _chat(http, {**chat_body("Hello", ignore_eos=True), field: 50})
    [choice] = reply["choices"]
    assert len(ascii_tokens(choice["message"]["content"])) == 50
    assert is_bank_text(choice["message"]["content"])
    assert choice["finish_reason"] == "length"
    assert reply["usage"] == usage(6, 50)


@pytest.mark.parametrize("max_tokens", [2, 6, 7, 47, 150])
def test_random_length_bounded_and_length_iff_max(http: httpx.Client, max_tokens: int) -> None:
    reply = _chat(http, chat_body("Hello", max_tokens=max_tokens, n=80))
    reasons = set()
    for choice in reply["choices"]:
        count = len(ascii_tokens(choice["message"]["content"]))
        assert 1 <= count <= max_tokens
        assert (choice["finish_reason"] == "length") == (count == max_tokens), (count, choice)
        if choice["finish_reason"] == "stop":  # room was left for the end of sequence
            assert count + EOS_TOKENS <= max_tokens
        assert choice["finish_reason"] in ("stop", "length")
        reasons.add(choice["finish_reason"])
    # 15% of draws give exactly M (and M <= 6 is uniform), so 80 draws see both outcomes.
    assert reasons == {"stop", "length"}


def test_random_without_max_tokens_fits_the_context(http: httpx.Client) -> None:
    reply = _chat(http, chat_body("Hello", n=20))
    for choice in reply["choices"]:
        count = len(ascii_tokens(choice["message"]["content"]))
        assert 1 <= count <= 1024 - 6
        assert choice["finish_reason"] == "stop"
