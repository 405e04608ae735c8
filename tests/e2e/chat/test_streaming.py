"""SSE streams of chat and completions: framing, chunk order and shapes, usage, [DONE]."""

from __future__ import annotations

import concurrent.futures
import re

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.http import (
    CHAT,
    COMPLETIONS,
    EOS_TOKENS,
    REQUEST_ID_RE,
    Stream,
    ascii_tokens,
    chat_body,
    chat_stream,
    completion_stream,
    is_bank_text,
    post,
    stream_post,
    stream_usage,
)

# ---------------------------------------------------------------------- chat


def test_chat_stream_protocol(http: httpx.Client) -> None:
    sse = stream_post(http, CHAT, chat_body("Hello", max_tokens=40, stream=True))
    stream = chat_stream(sse)
    [only] = stream.choices.values()
    assert only.role_chunks == 1
    assert is_bank_text(only.text), only.text
    # The end-of-sequence token of a natural stop counts against max_tokens too.
    assert 1 <= only.tokens <= 40
    assert only.pieces == ascii_tokens(only.text)
    assert (only.finish_reason == "length") == (len(only.pieces) == 40) == (not only.eos)
    [rid] = stream.ids
    assert re.fullmatch(f"chatcmpl-{REQUEST_ID_RE}", rid)


def test_chat_stream_chunk_order(http: httpx.Client) -> None:
    """Role chunk, then one chunk per token, the last carrying the finish, then [DONE]: no
    chunk of its own for the finish, so chunks and tokens match one to one."""
    sse = stream_post(http, CHAT, chat_body("Hello", max_tokens=5, stream=True))
    deltas = [chunk["choices"][0]["delta"] for chunk in sse.chunks]
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in sse.chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert all(set(d) == {"content"} and d["content"] for d in deltas[1:-1])
    assert finishes[:-1] == [None] * (len(deltas) - 1)
    assert finishes[-1] in ("stop", "length")
    if finishes[-1] == "stop":
        # The model ended it: its end-of-sequence step adds no text, and vLLM 0.32 sends
        # its chunk with an empty delta.
        assert deltas[-1] == {}
    else:
        assert len(deltas) == 1 + 5 and set(deltas[-1]) == {"content"} and deltas[-1]["content"]
    assert sse.raw.endswith(b"\n\ndata: [DONE]\n\n")


def test_chat_stream_include_usage(http: httpx.Client) -> None:
    body = chat_body("Hello", max_tokens=30, stream=True, stream_options={"include_usage": True})
    stream = chat_stream(stream_post(http, CHAT, body), include_usage=True)
    [only] = stream.choices.values()
    assert stream.usage == stream_usage(6, only.tokens)
    assert only.tokens == len(only.pieces) + (EOS_TOKENS if only.finish_reason == "stop" else 0)


def test_chat_stream_include_usage_false(http: httpx.Client) -> None:
    body = chat_body("Hello", max_tokens=5, stream=True, stream_options={"include_usage": False})
    sse = stream_post(http, CHAT, body)
    chat_stream(sse)
    assert all(chunk["choices"] for chunk in sse.chunks)


def test_chat_stream_ignore_eos(http: httpx.Client) -> None:
    body = chat_body("Hello", max_tokens=50, ignore_eos=True, stream=True)
    body["stream_options"] = {"include_usage": True}
    stream = chat_stream(stream_post(http, CHAT, body), include_usage=True)
    [only] = stream.choices.values()
    assert len(only.pieces) == 50
    assert only.finish_reason == "length"
    assert not only.eos
    assert stream.usage == stream_usage(6, 50)


def test_chat_stream_n_three(http: httpx.Client) -> None:
    body = chat_body("Hello", max_tokens=20, n=3, stream=True)
    body["stream_options"] = {"include_usage": True}
    sse = stream_post(http, CHAT, body)
    stream = chat_stream(sse, include_usage=True)
    assert sorted(stream.choices) == [0, 1, 2]
    assert len(stream.ids) == 1
    total = 0
    for state in stream.choices.values():
        assert state.role_chunks == 1
        assert is_bank_text(state.text)
        assert 1 <= state.tokens <= 20
        total += state.tokens
    assert [chunk["choices"] == [] for chunk in sse.chunks].count(True) == 1
    assert stream.usage == stream_usage(6, total)


@pytest.mark.parametrize(
    "text", ["This is a test.", "héllo | wörld 🙂", "  leading", "multi\nline\n\ttext "]
)
def test_chat_stream_echo_joins_to_the_message(echo_http: httpx.Client, text: str) -> None:
    body = chat_body(text, stream=True, stream_options={"include_usage": True})
    stream = chat_stream(stream_post(echo_http, CHAT, body), include_usage=True, one_token=False)
    [only] = stream.choices.values()
    assert only.text == text
    assert only.finish_reason == "stop"
    assert only.eos
    assert stream.usage is not None
    assert stream.usage["completion_tokens"] == len(only.pieces) + EOS_TOKENS
    non_stream = post(echo_http, CHAT, chat_body(text)).json()
    assert {key: non_stream["usage"][key] for key in stream.usage} == stream.usage


def test_chat_stream_echo_of_an_empty_message(echo_http: httpx.Client) -> None:
    """An empty output is a normal stream (role chunk, then the end-of-sequence token's
    chunk carrying the finish), not an error event."""
    body = chat_body("", stream=True, stream_options={"include_usage": True})
    sse = stream_post(echo_http, CHAT, body)
    assert not any("error" in chunk for chunk in sse.chunks), sse.chunks
    stream = chat_stream(sse, include_usage=True)
    [only] = stream.choices.values()
    assert only.pieces == []
    assert only.finish_reason == "stop"
    assert only.eos
    assert len(sse.chunks) == 3  # role, end of sequence, usage
    assert stream.usage == stream_usage(5, EOS_TOKENS)


def test_chat_stream_echo_finish_length(echo_http: httpx.Client) -> None:
    body = chat_body("This is a test.", max_tokens=3, stream=True)
    stream = chat_stream(stream_post(echo_http, CHAT, body))
    [only] = stream.choices.values()
    assert only.text == "This is a test."
    assert only.finish_reason == "length"
    assert not only.eos


# ----------------------------------------------------------------- completions


def test_completions_stream_protocol(http: httpx.Client) -> None:
    body = {"prompt": "Hello", "max_tokens": 30, "stream": True}
    sse = stream_post(http, COMPLETIONS, body)
    stream = completion_stream(sse)
    [only] = stream.choices.values()
    assert is_bank_text(only.text)
    assert only.pieces == ascii_tokens(only.text)
    # No finish chunk of its own: the last token's chunk carries it.
    assert len(sse.chunks) == only.tokens <= 30
    assert (sse.chunks[-1]["choices"][0]["text"] == "") == only.eos
    [rid] = stream.ids
    assert re.fullmatch(f"cmpl-{REQUEST_ID_RE}", rid)


def test_completions_stream_include_usage(http: httpx.Client) -> None:
    body = {
        "prompt": [1, 2, 3, 4],
        "max_tokens": 50,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    stream = completion_stream(stream_post(http, COMPLETIONS, body), include_usage=True)
    [only] = stream.choices.values()
    assert len(only.pieces) == 50
    assert only.finish_reason == "length"
    assert stream.usage == stream_usage(4, 50)


def test_completions_stream_prompts_times_n(echo_http: httpx.Client) -> None:
    prompts = ["This is a test.", "Hello world"]
    body = {
        "prompt": prompts,
        "n": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sse = stream_post(echo_http, COMPLETIONS, body)
    stream = completion_stream(sse, include_usage=True, one_token=True)
    assert sorted(stream.choices) == list(range(6))
    for index, state in stream.choices.items():
        assert state.text == prompts[index // 3]
        assert state.finish_reason == "stop"
        assert state.eos
    assert len(stream.ids) == 1
    # 3 x (5 + 2) text tokens and an end of sequence for each of the 6 choices.
    assert stream.usage == stream_usage(7, 21 + 6 * EOS_TOKENS)


def test_completions_stream_token_ids_echo(echo_http: httpx.Client) -> None:
    body = {"prompt": [[1, 2, 3], [10, 20], [7]], "stream": True}
    stream = completion_stream(stream_post(echo_http, COMPLETIONS, body), one_token=False)
    assert [stream.choices[i].text for i in range(3)] == ["1,2,3", "10,20", "7"]
    assert [len(stream.choices[i].pieces) for i in range(3)] == [3, 2, 1]


# ------------------------------------------------------------ errors and stream


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_validation_errors_are_plain_json_when_streaming(http: httpx.Client, path: str) -> None:
    body = {**chat_body(), "prompt": "Hi", "n": 0, "stream": True}
    assert_openai_error(post(http, path, body), 400, "n must be at least 1")


def test_stream_response_headers(http: httpx.Client) -> None:
    with http.stream("POST", CHAT, json=chat_body("Hello", max_tokens=3, stream=True)) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in reply.headers
        body = reply.read()
    assert body.endswith(b"data: [DONE]\n\n")


def test_many_concurrent_streams(http: httpx.Client) -> None:
    """Interleaved streams on one server stay intact."""

    def one(i: int) -> Stream:
        body = chat_body("Hello", max_tokens=10 + i, ignore_eos=True, stream=True)
        return chat_stream(stream_post(http, CHAT, body))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        streams = list(pool.map(one, range(16)))
    for i, stream in enumerate(streams):
        assert len(stream.choices[0].pieces) == 10 + i
    assert len({next(iter(s.ids)) for s in streams}) == 16


def test_stream_false_is_plain_json(http: httpx.Client) -> None:
    response = post(http, CHAT, chat_body("Hello", max_tokens=2, stream=False))
    assert response.headers["content-type"].startswith("application/json")
    assert not response.text.startswith("data:")


def test_body_is_not_touched_after_done(http: httpx.Client) -> None:
    sse = stream_post(http, CHAT, chat_body("Hello", max_tokens=3, stream=True))
    assert sse.raw.count(b"data: [DONE]") == 1
    assert sse.raw.count(b"\n\n") == len(sse.chunks) + 1
    assert not sse.raw.startswith(b"\n")
    assert b"event:" not in sse.raw
