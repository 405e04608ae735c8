"""SSE streams of chat and completions: framing, chunk order and shapes, usage, [DONE]."""

from __future__ import annotations

import concurrent.futures
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.http import (
    CHAT,
    COMPLETIONS,
    REQUEST_ID_RE,
    SSE,
    ascii_tokens,
    chat_body,
    is_bank_text,
    is_one_token,
    post,
    stream_post,
    usage,
)

CHUNK_KEYS = {"id", "object", "created", "model", "choices", "usage"}


@dataclass
class Choice:
    role_chunks: int = 0
    pieces: list[str] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


@dataclass
class Stream:
    choices: dict[int, Choice]
    usage: dict[str, Any] | None
    ids: set[str]


def _common(sse: SSE, obj: str, include_usage: bool) -> tuple[list[dict[str, Any]], Any]:
    """Checks what every chunk shares; returns the choice chunks and the usage (or None)."""
    chunks = sse.chunks
    assert chunks, "a stream has chunks before [DONE]"
    usage_chunk = None
    if include_usage:
        usage_chunk = chunks[-1]
        chunks = chunks[:-1]
        assert set(usage_chunk) == CHUNK_KEYS, usage_chunk
        assert usage_chunk["choices"] == []
        assert usage_chunk["object"] == obj
    first = sse.chunks[0]
    for chunk in sse.chunks:
        assert chunk["id"] == first["id"]
        assert chunk["created"] == first["created"]
        assert chunk["model"] == first["model"]
        assert type(chunk["created"]) is int
    for chunk in chunks:
        assert set(chunk) == CHUNK_KEYS, chunk
        assert chunk["object"] == obj
        assert chunk["usage"] is None
        assert len(chunk["choices"]) == 1, chunk
    return chunks, usage_chunk["usage"] if usage_chunk else None


def chat_stream(sse: SSE, include_usage: bool = False, one_token: bool = True) -> Stream:
    """Parses a chat stream, checking each choice's chunks: the role chunk first, then
    non-empty content chunks, then an empty finish chunk, and nothing after it."""
    chunks, usage_value = _common(sse, "chat.completion.chunk", include_usage)
    choices: dict[int, Choice] = {}
    for chunk in chunks:
        choice = chunk["choices"][0]
        assert set(choice) == {"index", "delta", "logprobs", "finish_reason"}, choice
        state = choices.setdefault(choice["index"], Choice())
        assert state.finish_reason is None, "nothing after a choice's finish chunk"
        delta = choice["delta"]
        if state.role_chunks == 0:
            assert delta == {"role": "assistant", "content": ""}, "role chunk comes first"
            assert choice["finish_reason"] is None
            assert choice["logprobs"] is None
            state.role_chunks = 1
        elif choice["finish_reason"] is not None:
            assert delta == {}, chunk
            assert choice["logprobs"] is None
            assert choice["finish_reason"] in ("stop", "length")
            state.finish_reason = choice["finish_reason"]
        else:
            assert set(delta) == {"content"}, delta
            assert isinstance(delta["content"], str) and delta["content"]
            if one_token:
                assert is_one_token(delta["content"]), delta["content"]
            state.pieces.append(delta["content"])
    for state in choices.values():
        assert state.finish_reason is not None, "every choice ends with a finish chunk"
    assert sorted(choices) == list(range(len(choices)))
    return Stream(choices, usage_value, {c["id"] for c in sse.chunks})


def completion_stream(sse: SSE, include_usage: bool = False, one_token: bool = True) -> Stream:
    chunks, usage_value = _common(sse, "text_completion", include_usage)
    choices: dict[int, Choice] = {}
    for chunk in chunks:
        choice = chunk["choices"][0]
        assert set(choice) == {"index", "text", "logprobs", "finish_reason"}, choice
        state = choices.setdefault(choice["index"], Choice())
        assert state.finish_reason is None, "nothing after a choice's finish chunk"
        if choice["finish_reason"] is not None:
            assert choice["text"] == ""
            assert choice["logprobs"] is None
            assert choice["finish_reason"] in ("stop", "length")
            state.finish_reason = choice["finish_reason"]
        else:
            text = choice["text"]
            assert isinstance(text, str) and text, "no role chunk, no empty token chunk"
            if one_token:
                assert is_one_token(text), text
            assert choice["logprobs"] is None
            state.pieces.append(text)
    for state in choices.values():
        assert state.finish_reason is not None
    assert sorted(choices) == list(range(len(choices)))
    return Stream(choices, usage_value, {c["id"] for c in sse.chunks})


# ---------------------------------------------------------------------- chat


def test_chat_stream_protocol(http: httpx.Client) -> None:
    sse = stream_post(http, CHAT, chat_body("Hello", max_tokens=40, stream=True))
    stream = chat_stream(sse)
    [only] = stream.choices.values()
    assert only.role_chunks == 1
    assert is_bank_text(only.text), only.text
    assert 1 <= len(only.pieces) <= 40
    assert only.pieces == ascii_tokens(only.text)
    assert (only.finish_reason == "length") == (len(only.pieces) == 40)
    assert all(chunk["usage"] is None for chunk in sse.chunks), "no usage unless asked"
    [rid] = stream.ids
    assert re.fullmatch(f"chatcmpl-{REQUEST_ID_RE}", rid)


def test_chat_stream_chunk_order(http: httpx.Client) -> None:
    """Role chunk, then token chunks, then the finish chunk, then [DONE]."""
    sse = stream_post(http, CHAT, chat_body("Hello", max_tokens=5, stream=True))
    deltas = [chunk["choices"][0]["delta"] for chunk in sse.chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[-1] == {}
    assert all(set(d) == {"content"} for d in deltas[1:-1])
    assert sse.chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert sse.raw.endswith(b"\n\ndata: [DONE]\n\n")


def test_chat_stream_include_usage(http: httpx.Client) -> None:
    body = chat_body("Hello", max_tokens=30, stream=True, stream_options={"include_usage": True})
    stream = chat_stream(stream_post(http, CHAT, body), include_usage=True)
    [only] = stream.choices.values()
    assert stream.usage == usage(6, len(only.pieces))


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
    assert stream.usage == usage(6, 50)


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
        assert 1 <= len(state.pieces) <= 20
        total += len(state.pieces)
    assert [chunk["choices"] == [] for chunk in sse.chunks].count(True) == 1
    assert stream.usage == usage(6, total)


@pytest.mark.parametrize(
    "text", ["This is a test.", "héllo | wörld 🙂", "  leading", "multi\nline\n\ttext "]
)
def test_chat_stream_echo_joins_to_the_message(echo_http: httpx.Client, text: str) -> None:
    body = chat_body(text, stream=True, stream_options={"include_usage": True})
    stream = chat_stream(stream_post(echo_http, CHAT, body), include_usage=True, one_token=False)
    [only] = stream.choices.values()
    assert only.text == text
    assert only.finish_reason == "stop"
    assert stream.usage is not None
    assert stream.usage["completion_tokens"] == len(only.pieces)
    non_stream = post(echo_http, CHAT, chat_body(text)).json()
    assert non_stream["usage"] == stream.usage


def test_chat_stream_echo_of_an_empty_message(echo_http: httpx.Client) -> None:
    """An empty output is a normal stream (role chunk, finish chunk), not an error event."""
    body = chat_body("", stream=True, stream_options={"include_usage": True})
    sse = stream_post(echo_http, CHAT, body)
    assert not any("error" in chunk for chunk in sse.chunks), sse.chunks
    stream = chat_stream(sse, include_usage=True)
    [only] = stream.choices.values()
    assert only.pieces == []
    assert only.finish_reason == "stop"
    assert stream.usage == usage(5, 0)


def test_chat_stream_echo_finish_length(echo_http: httpx.Client) -> None:
    body = chat_body("This is a test.", max_tokens=3, stream=True)
    stream = chat_stream(stream_post(echo_http, CHAT, body))
    [only] = stream.choices.values()
    assert only.text == "This is a test."
    assert only.finish_reason == "length"


# ----------------------------------------------------------------- completions


def test_completions_stream_protocol(http: httpx.Client) -> None:
    body = {"prompt": "Hello", "max_tokens": 30, "stream": True}
    sse = stream_post(http, COMPLETIONS, body)
    stream = completion_stream(sse)
    [only] = stream.choices.values()
    assert is_bank_text(only.text)
    assert only.pieces == ascii_tokens(only.text)
    assert all(chunk["usage"] is None for chunk in sse.chunks)
    assert sse.chunks[-1]["choices"][0]["text"] == ""
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
    assert stream.usage == usage(4, 50)


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
    assert len(stream.ids) == 1
    assert stream.usage == usage(7, 21)


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
