"""--max-request-output-tokens over HTTP, and answers too large to make in one go: a request
that could make more is a 400 naming the limit (never a stream that starts), and streams
with thousands of tokens due at once still arrive whole and in order."""

from __future__ import annotations

import collections

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import CHAT, COMPLETIONS, chat_body, json_ok, post, stream_post

FLAG = "--max-request-output-tokens"

default_sim = server_fixture(["--max-num-seqs", "1000"])
default_http = http_fixture("default_sim")
small_sim = server_fixture([FLAG, "60", "--max-num-seqs", "8"])
small_http = http_fixture("small_sim")


@pytest.mark.parametrize("stream", [False, True])
def test_the_probes_request_is_refused_by_default(default_http: httpx.Client, stream: bool) -> None:
    body = chat_body(n=1000, max_tokens=1000, logprobs=True, top_logprobs=20, stream=stream)
    error = assert_openai_error(post(default_http, CHAT, body), 400, param="max_tokens")
    assert "could make 21000000 output tokens" in error["message"]
    assert f"more than the 500000 a request may ask for ({FLAG})" in error["message"]


def test_alternatives_count_against_the_limit(small_http: httpx.Client) -> None:
    assert post(small_http, CHAT, chat_body(n=3, max_tokens=20)).status_code == 200
    body = chat_body(n=3, max_tokens=10, logprobs=True, top_logprobs=1)  # 3 x 10 x 2
    assert post(small_http, CHAT, body).status_code == 200
    over = chat_body(n=3, max_tokens=10, logprobs=True, top_logprobs=2)  # 3 x 10 x 3
    assert_openai_error(post(small_http, CHAT, over), 400, param="max_tokens")


def test_completion_prompts_and_fields_are_named(small_http: httpx.Client) -> None:
    body = {"prompt": ["a", "b", "c", "d"], "max_tokens": 20}
    assert_openai_error(post(small_http, COMPLETIONS, body), 400, param="max_tokens")
    chat = chat_body(n=4, max_completion_tokens=20)
    assert_openai_error(post(small_http, CHAT, chat), 400, param="max_completion_tokens")


def test_detokenize_is_capped_too(small_http: httpx.Client) -> None:
    assert post(small_http, "/detokenize", {"tokens": [1] * 60}).status_code == 200
    error = assert_openai_error(post(small_http, "/detokenize", {"tokens": [1] * 61}), 400)
    assert error["param"] == "tokens" and FLAG in error["message"]


def test_a_stream_of_many_tokens_due_at_once_arrives_whole(default_http: httpx.Client) -> None:
    # 3 x 400 tokens, all due at once with no latency: written a slice at a time.
    sse = stream_post(
        default_http,
        CHAT,
        chat_body(
            n=3,
            max_tokens=400,
            ignore_eos=True,
            stream=True,
            stream_options={"include_usage": True},
        ),
    )
    contents: dict[int, list[str]] = collections.defaultdict(list)
    finished: dict[int, int] = {}
    for position, chunk in enumerate(sse.chunks[:-1]):
        (choice,) = chunk["choices"]
        index = choice["index"]
        assert index not in finished, "no chunk of a choice after its finish"
        if choice["finish_reason"] is not None:  # on the chunk of the last token
            finished[index] = position
        if "role" not in choice["delta"]:
            contents[index].append(choice["delta"]["content"])
    assert sorted(finished) == [0, 1, 2]
    assert all(len(contents[i]) == 400 for i in range(3))
    assert sse.chunks[-1]["usage"]["completion_tokens"] == 1200


def test_a_large_answer_is_whole(default_http: httpx.Client) -> None:
    body = chat_body(n=20, max_tokens=1000, ignore_eos=True, logprobs=True, top_logprobs=5)
    answer = json_ok(post(default_http, CHAT, body))
    assert len(answer["choices"]) == 20
    for choice in answer["choices"]:
        entries = choice["logprobs"]["content"]
        assert len(entries) == 1000
        assert all(len(entry["top_logprobs"]) == 5 for entry in entries)
        assert "".join(entry["token"] for entry in entries) == choice["message"]["content"]
