"""Synthetic logprobs: chat `logprobs`/`top_logprobs` and completions `logprobs: N`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.http import (
    CHAT,
    COMPLETIONS,
    ascii_tokens,
    chat_body,
    logprob,
    post,
    stream_post,
)

TEST_TOKENS = ["This ", "is ", "a ", "test", "."]  # "This is a test." in the simulated tokenizer
# The end-of-sequence token ends every answer the model stops by itself: it has logprobs
# like any token, and no text.
EOS = ""
ECHOED = [*TEST_TOKENS, EOS]  # the tokens of an echo of "This is a test."


def answer_tokens(text: str, finish_reason: str) -> list[str]:
    """The tokens of a random answer: its text's, and its end of sequence on a stop."""
    return ascii_tokens(text) + ([EOS] if finish_reason == "stop" else [])


def chat_entry(token: str, position: int, top: int) -> dict[str, Any]:
    """The expected `logprobs.content` entry: the token at L(p), and `top` entries from it
    down in steps of 0.5."""
    value = logprob(position)
    alternatives = [
        {"token": token if j == 0 else f"{token}_{j}", "logprob": value - 0.5 * j}
        for j in range(top)
    ]
    for alt in alternatives:
        alt["bytes"] = list(str(alt["token"]).encode())
    return {
        "token": token,
        "logprob": value,
        "bytes": list(token.encode()),
        "top_logprobs": alternatives,
    }


def assert_entries(
    actual: list[dict[str, Any]], tokens: list[str], top: int, start: int = 0
) -> None:
    assert len(actual) == len(tokens)
    for i, (entry, token) in enumerate(zip(actual, tokens, strict=True)):
        expected = chat_entry(token, start + i, top)
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}, entry
        assert entry["token"] == expected["token"]
        assert entry["bytes"] == expected["bytes"]
        assert entry["logprob"] == pytest.approx(expected["logprob"], abs=1e-9)
        assert len(entry["top_logprobs"]) == top
        for alt, want in zip(entry["top_logprobs"], expected["top_logprobs"], strict=True):
            assert set(alt) == {"token", "logprob", "bytes"}, alt
            assert alt["token"] == want["token"]
            assert alt["bytes"] == want["bytes"]
            assert alt["logprob"] == pytest.approx(want["logprob"], abs=1e-9)


# ---------------------------------------------------------------------- chat


def test_chat_logprobs_off_is_null(echo_http: httpx.Client) -> None:
    reply = post(echo_http, CHAT, chat_body("This is a test.")).json()
    assert reply["choices"][0]["logprobs"] is None
    reply = post(echo_http, CHAT, chat_body("This is a test.", logprobs=False)).json()
    assert reply["choices"][0]["logprobs"] is None


def test_chat_logprobs_without_top_logprobs(echo_http: httpx.Client) -> None:
    """OpenAI: `logprobs: true` alone gives each entry an empty `top_logprobs` list."""
    reply = post(echo_http, CHAT, chat_body("This is a test.", logprobs=True)).json()
    logprobs = reply["choices"][0]["logprobs"]
    assert set(logprobs) == {"content"}
    assert_entries(logprobs["content"], ECHOED, 0)
    assert all(entry["top_logprobs"] == [] for entry in logprobs["content"])


def test_chat_top_logprobs_zero(echo_http: httpx.Client) -> None:
    body = chat_body("This is a test.", logprobs=True, top_logprobs=0)
    content = post(echo_http, CHAT, body).json()["choices"][0]["logprobs"]["content"]
    assert_entries(content, ECHOED, 0)


@pytest.mark.parametrize("top", [1, 2, 5, 20])
def test_chat_top_logprobs_k(echo_http: httpx.Client, top: int) -> None:
    body = chat_body("This is a test.", logprobs=True, top_logprobs=top)
    content = post(echo_http, CHAT, body).json()["choices"][0]["logprobs"]["content"]
    assert_entries(content, ECHOED, top)


def test_chat_top_logprobs_two_exact_values(echo_http: httpx.Client) -> None:
    body = chat_body("This is a test.", logprobs=True, top_logprobs=2)
    content = post(echo_http, CHAT, body).json()["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in content] == [-1.0, -1.1, -1.2, -1.0, -1.1, -1.2]
    assert content[1]["top_logprobs"] == [
        {"token": "is ", "logprob": -1.1, "bytes": [105, 115, 32]},
        {"token": "is _1", "logprob": -1.6, "bytes": [105, 115, 32, 95, 49]},
    ]
    assert content[-1] == {
        "token": "",
        "logprob": -1.2,
        "bytes": [],
        "top_logprobs": [
            {"token": "", "logprob": -1.2, "bytes": []},
            {"token": "_1", "logprob": -1.7, "bytes": [95, 49]},
        ],
    }


def test_chat_logprob_bytes_are_utf8(echo_http: httpx.Client) -> None:
    text = "héllo wörld 🙂"
    reply = post(echo_http, CHAT, chat_body(text, logprobs=True, top_logprobs=1)).json()
    content = reply["choices"][0]["logprobs"]["content"]
    assert "".join(entry["token"] for entry in content) == text
    assert len(content) == reply["usage"]["completion_tokens"]
    for entry in content:
        assert entry["bytes"] == list(entry["token"].encode("utf-8"))


def test_chat_random_logprobs_match_tokens(http: httpx.Client) -> None:
    body = chat_body("Hello", max_tokens=30, logprobs=True, top_logprobs=3, n=2)
    reply = post(http, CHAT, body).json()
    for choice in reply["choices"]:
        tokens = answer_tokens(choice["message"]["content"], choice["finish_reason"])
        assert_entries(choice["logprobs"]["content"], tokens, 3)


def _stream_logprobs(
    chunks: list[dict[str, Any]],
) -> dict[int, list[tuple[str | None, Any]]]:
    """Per choice: (delta content or None, logprobs) of each chunk."""
    result: dict[int, list[tuple[str | None, Any]]] = {}
    for chunk in chunks:
        if not chunk["choices"]:
            continue
        choice = chunk["choices"][0]
        content = choice["delta"].get("content")
        result.setdefault(choice["index"], []).append((content, choice["logprobs"]))
    return result


@pytest.mark.parametrize("top", [None, 0, 2])
def test_chat_stream_logprobs(http: httpx.Client, top: int | None) -> None:
    """One entry per token chunk, positions counting up from 0 in each choice; the last
    token's chunk carries the finish, with its logprobs."""
    body = chat_body("Hello", max_tokens=12, ignore_eos=True, n=2, stream=True, logprobs=True)
    if top is not None:
        body["top_logprobs"] = top
    per_choice = _stream_logprobs(stream_post(http, CHAT, body).chunks)
    assert sorted(per_choice) == [0, 1]
    for chunks in per_choice.values():
        role, *tokens = chunks
        assert role == ("", None)  # role chunk: content "" and no logprobs
        assert len(tokens) == 12
        for position, (content, logprobs) in enumerate(tokens):
            assert set(logprobs) == {"content"}
            assert content is not None
            assert_entries(logprobs["content"], [content], top or 0, start=position)


def test_chat_stream_logprobs_echo_values(echo_http: httpx.Client) -> None:
    body = chat_body("This is a test.", stream=True, logprobs=True, top_logprobs=2)
    sse = stream_post(echo_http, CHAT, body)
    [chunks] = _stream_logprobs(sse.chunks).values()
    tokens = chunks[1:]
    # The end of sequence adds no text: its chunk's delta is empty, as vLLM 0.32 sends it,
    # while its logprobs entry still names the token.
    assert sse.chunks[-1]["choices"][0]["delta"] == {}
    assert [content for content, _ in tokens] == [*TEST_TOKENS, None]
    assert [logprobs["content"][0]["token"] for _, logprobs in tokens] == ECHOED
    values = [logprobs["content"][0]["logprob"] for _, logprobs in tokens]
    assert values == [-1.0, -1.1, -1.2, -1.0, -1.1, -1.2]


def test_chat_stream_without_logprobs_has_null_logprobs(http: httpx.Client) -> None:
    chunks = stream_post(http, CHAT, chat_body("Hello", max_tokens=5, stream=True)).chunks
    assert all(chunk["choices"][0]["logprobs"] is None for chunk in chunks)


# ----------------------------------------------------------------- completions


def completion_logprobs(tokens: list[str], n: int, start_offset: int = 0) -> dict[str, Any]:
    offsets = []
    offset = start_offset
    for token in tokens:
        offsets.append(offset)
        offset += len(token)  # in characters, as vLLM counts them
    tops = []
    for i, token in enumerate(tokens):
        tops.append(
            {(token if j == 0 else f"{token}_{j}"): logprob(i) - 0.5 * j for j in range(max(n, 1))}
        )
    return {
        "tokens": tokens,
        "token_logprobs": [logprob(i) for i in range(len(tokens))],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def assert_completion_logprobs(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert set(actual) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert actual["tokens"] == expected["tokens"]
    assert actual["text_offset"] == expected["text_offset"]
    assert actual["token_logprobs"] == pytest.approx(expected["token_logprobs"], abs=1e-9)
    assert len(actual["top_logprobs"]) == len(expected["top_logprobs"])
    for got, want in zip(actual["top_logprobs"], expected["top_logprobs"], strict=True):
        assert set(got) == set(want)
        for key, value in want.items():
            assert got[key] == pytest.approx(value, abs=1e-9)


def test_completions_logprobs_absent_is_null(echo_http: httpx.Client) -> None:
    reply = post(echo_http, COMPLETIONS, {"prompt": "This is a test."}).json()
    assert reply["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_completions_logprobs_n(echo_http: httpx.Client, n: int) -> None:
    reply = post(echo_http, COMPLETIONS, {"prompt": "This is a test.", "logprobs": n}).json()
    actual = reply["choices"][0]["logprobs"]
    assert_completion_logprobs(actual, completion_logprobs(ECHOED, n))
    assert actual["text_offset"] == [0, 5, 8, 10, 14, 15]
    assert all(len(top) == max(n, 1) for top in actual["top_logprobs"])


def test_completions_logprobs_two_exact(echo_http: httpx.Client) -> None:
    reply = post(echo_http, COMPLETIONS, {"prompt": "a test", "logprobs": 2}).json()
    assert reply["choices"][0]["logprobs"] == {
        "tokens": ["a ", "test", EOS],
        "token_logprobs": [-1.0, -1.1, -1.2],
        "top_logprobs": [
            {"a ": -1.0, "a _1": -1.5},
            {"test": -1.1, "test_1": -1.6},
            {"": -1.2, "_1": -1.7},
        ],
        "text_offset": [0, 2, 6],
    }


def test_completions_text_offset_counts_characters(echo_http: httpx.Client) -> None:
    """vLLM's offsets index the text as characters, not as its UTF-8 bytes."""
    text = "héllo wörld 🙂 end"
    reply = post(echo_http, COMPLETIONS, {"prompt": text, "logprobs": 1}).json()
    logprobs = reply["choices"][0]["logprobs"]
    assert "".join(logprobs["tokens"]) == text
    assert logprobs["tokens"][-1] == EOS
    expected = completion_logprobs(logprobs["tokens"], 1)
    assert logprobs["text_offset"] == expected["text_offset"]
    assert logprobs["text_offset"][-1] == len(text)  # the end of sequence, after it all
    assert logprobs["text_offset"][-2] == len(text) - len(logprobs["tokens"][-2])


def test_completions_random_logprobs_per_choice(http: httpx.Client) -> None:
    body = {"prompt": ["Hello", "World"], "n": 2, "max_tokens": 15, "logprobs": 3}
    reply = post(http, COMPLETIONS, body).json()
    assert len(reply["choices"]) == 4
    for choice in reply["choices"]:
        tokens = answer_tokens(choice["text"], choice["finish_reason"])
        assert_completion_logprobs(choice["logprobs"], completion_logprobs(tokens, 3))


@pytest.mark.parametrize("n", [0, 2])
def test_completions_stream_logprobs(http: httpx.Client, n: int) -> None:
    body = {"prompt": [[1], [2]], "max_tokens": 10, "ignore_eos": True, "logprobs": n}
    body["stream"] = True
    chunks = stream_post(http, COMPLETIONS, body).chunks
    per_choice: dict[int, list[dict[str, Any]]] = {}
    for chunk in chunks:
        per_choice.setdefault(chunk["choices"][0]["index"], []).append(chunk["choices"][0])
    assert sorted(per_choice) == [0, 1]
    for tokens in per_choice.values():
        # ignore_eos: ten tokens, the last carrying the finish, and no end of sequence.
        assert [choice["finish_reason"] for choice in tokens] == [None] * 9 + ["length"]
        assert len(tokens) == 10
        texts = [choice["text"] for choice in tokens]
        whole = completion_logprobs(texts, n)
        for i, choice in enumerate(tokens):
            expected = {
                "tokens": [texts[i]],
                "token_logprobs": [whole["token_logprobs"][i]],
                "top_logprobs": [whole["top_logprobs"][i]],
                "text_offset": [whole["text_offset"][i]],
            }
            assert_completion_logprobs(choice["logprobs"], expected)
