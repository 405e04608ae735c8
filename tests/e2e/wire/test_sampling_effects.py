"""The sampling parameters that change an answer act as in vLLM: stop strings and stop
token ids end it (and say so in `stop_reason`), min_tokens holds them back, a seed or
temperature 0 repeats it, and completions echo their prompt and stop at 16 tokens."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from tests.support.fixtures import anthropic_fixture, http_fixture, server_fixture
from tests.support.http import CHAT, COMPLETIONS, json_ok, post, stream_post

TEXT = "Hello world, this is a test. And more words here."

echoing = server_fixture(["--mode", "echo"])
echo_client = http_fixture("echoing")
claude = anthropic_fixture("echoing")
randomly = server_fixture(["--max-model-len", "256"])
random_client = http_fixture("randomly")


def _chat(client: httpx.Client, **extra: Any) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": TEXT}], **extra}
    return json_ok(post(client, CHAT, body))


def _tokens(client: httpx.Client, text: str) -> list[int]:
    tokens: list[int] = json_ok(post(client, "/tokenize", {"prompt": text}))["tokens"]
    return tokens


def test_a_stop_string_ends_the_answer_before_it(echo_client: httpx.Client) -> None:
    choice = _chat(echo_client, stop=[",", "zzz"])["choices"][0]
    assert choice["message"]["content"] == "Hello world"
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", ",")


def test_include_stop_str_in_output_keeps_it(echo_client: httpx.Client) -> None:
    choice = _chat(echo_client, stop="this", include_stop_str_in_output=True)["choices"][0]
    assert choice["message"]["content"] == "Hello world, this"
    assert choice["stop_reason"] == "this"


def test_the_earliest_stop_wins_whatever_the_order(echo_client: httpx.Client) -> None:
    choice = _chat(echo_client, stop=["more", "test"])["choices"][0]
    assert choice["message"]["content"] == "Hello world, this is a "
    assert choice["stop_reason"] == "test"


def test_the_token_that_completed_a_stop_string_still_counts(echo_client: httpx.Client) -> None:
    plain = _chat(echo_client)["usage"]["completion_tokens"]  # every token and the EOS
    stopped = _chat(echo_client, stop=".")["usage"]["completion_tokens"]
    assert stopped == len(_tokens(echo_client, "Hello world, this is a test. "))
    assert stopped < plain


def test_a_stop_token_id_ends_the_answer_with_that_token(echo_client: httpx.Client) -> None:
    (this,) = _tokens(echo_client, "this ")
    choice = _chat(echo_client, stop_token_ids=[this], return_token_ids=True)["choices"][0]
    assert choice["message"]["content"] == "Hello world, this "
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", this)
    assert choice["token_ids"][-1] == this


def test_min_tokens_holds_a_stop_back(echo_client: httpx.Client) -> None:
    # "e" first ends in token 0 ("Hello "); from the fifth token on, first in "test".
    choice = _chat(echo_client, stop=["e"], min_tokens=5)["choices"][0]
    assert choice["message"]["content"] == "Hello world, this is a t"
    assert choice["stop_reason"] == "e"
    assert _chat(echo_client, stop=["e"])["choices"][0]["message"]["content"] == "H"


def test_an_answer_the_model_ended_ends_with_its_end_of_sequence_token(
    echo_client: httpx.Client,
) -> None:
    answer = _chat(echo_client, return_token_ids=True)
    choice = answer["choices"][0]
    assert choice["message"]["content"] == TEXT
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", None)
    text_tokens = _tokens(echo_client, TEXT)
    assert choice["token_ids"][:-1] == text_tokens
    assert answer["usage"]["completion_tokens"] == len(text_tokens) + 1


def test_a_streamed_stop_string_is_cut_from_the_text(echo_client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": TEXT}], "stream": True, "stop": ","}
    chunks = stream_post(echo_client, CHAT, body).chunks
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert text == "Hello world"
    assert chunks[-1]["choices"][0]["stop_reason"] == ","


def test_anthropic_stop_sequences_end_the_message(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="test-model",
        max_tokens=100,
        messages=[{"role": "user", "content": TEXT}],
        stop_sequences=["is a"],
    )
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "is a"
    assert message.content[0].type == "text" and message.content[0].text == "Hello world, this "


def test_the_same_seed_gives_the_same_answer(random_client: httpx.Client) -> None:
    answers = {_chat(random_client, seed=7, max_tokens=40)["choices"][0]["message"]["content"]}
    answers.add(_chat(random_client, seed=7, max_tokens=40)["choices"][0]["message"]["content"])
    assert len(answers) == 1
    others = {
        _chat(random_client, seed=seed, max_tokens=40)["choices"][0]["message"]["content"]
        for seed in range(8, 14)
    }
    assert len(others) > 1, "different seeds must not all give one answer"


def test_temperature_zero_gives_the_same_answer_for_the_same_prompt(
    random_client: httpx.Client,
) -> None:
    contents = {
        _chat(random_client, temperature=0, max_tokens=40)["choices"][0]["message"]["content"]
        for _ in range(4)
    }
    assert len(contents) == 1


# ---- completions ---------------------------------------------------------------------------


def _complete(client: httpx.Client, **body: Any) -> dict[str, Any]:
    return json_ok(post(client, COMPLETIONS, {"prompt": "Hello world", **body}))


def test_completions_stop_at_sixteen_tokens_by_default(random_client: httpx.Client) -> None:
    counts = [_complete(random_client)["usage"]["completion_tokens"] for _ in range(30)]
    assert max(counts) <= 16
    assert 16 in counts, "about 15% of answers run to the limit"


def test_echo_puts_the_prompt_before_the_answer(echo_client: httpx.Client) -> None:
    choice = _complete(echo_client, echo=True, max_tokens=50)["choices"][0]
    assert choice["text"] == "Hello world" + "Hello world"


def test_echo_with_max_tokens_zero_returns_the_prompt_alone(
    random_client: httpx.Client,
) -> None:
    answer = _complete(random_client, echo=True, max_tokens=0, logprobs=1)
    choice = answer["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == ("Hello world", "length")
    assert answer["usage"]["completion_tokens"] == 0
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == ["Hello ", "world"]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert logprobs["text_offset"] == [0, 6]


def test_echo_with_logprobs_lists_the_prompt_tokens_first(random_client: httpx.Client) -> None:
    choice = _complete(random_client, echo=True, max_tokens=3, ignore_eos=True, logprobs=0)[
        "choices"
    ][0]
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == 2 + 3
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["token_logprobs"][0] is None
    assert all(value is not None for value in logprobs["token_logprobs"][1:])


def test_max_tokens_zero_without_echo_is_refused(random_client: httpx.Client) -> None:
    response = post(random_client, COMPLETIONS, {"prompt": "Hi", "max_tokens": 0})
    assert response.status_code == 400


# ---- context length, as vLLM words it ------------------------------------------------------


def test_more_output_than_the_context_is_refused_in_vllms_words(
    random_client: httpx.Client,
) -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5000}
    error = post(random_client, CHAT, body).json()["error"]
    assert error["message"] == (
        "max_tokens=5000 cannot be greater than max_model_len=256. Please request fewer "
        "output tokens. (parameter=max_tokens, value=5000)"
    )
    assert (error["param"], error["code"]) == ("max_tokens", 400)


def test_a_prompt_that_leaves_too_little_room_is_refused_in_vllms_words(
    random_client: httpx.Client,
) -> None:
    body = {"prompt": "word " * 250, "max_tokens": 100}
    error = post(random_client, COMPLETIONS, body).json()["error"]
    assert error["message"] == (
        "This model's maximum context length is 256 tokens. However, you requested 100 "
        "output tokens and your prompt contains at least 157 input tokens, for a total "
        "of at least 257 tokens. Please reduce the length of the input prompt or the number of "
        "requested output tokens. (parameter=input_tokens, value=157)"
    )
    assert error["param"] == "input_tokens"


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_prompt_longer_than_the_context_is_refused_in_vllms_words(
    random_client: httpx.Client, path: str
) -> None:
    text = "word " * 300
    body = (
        {"prompt": text}
        if path == COMPLETIONS
        else {"messages": [{"role": "user", "content": text}]}
    )
    error = post(random_client, path, body).json()["error"]
    assert error["message"] == (
        "This model's maximum context length is 256 tokens. However, your prompt contains at "
        "least 257 input tokens, which exceeds this limit even without any output tokens. "
        "Please reduce the length of the input prompt. (parameter=input_tokens, value=257)"
    )
    assert error["param"] == "input_tokens"
