"""Chat and completion streams framed as vLLM frames them: one chunk per generated token, the
finish on the last token's chunk (a natural stop is its end-of-sequence token, one step
later, with no text: an empty chat delta, an empty completion text), usage and the system
fingerprint where vLLM puts them."""

from __future__ import annotations

import itertools
import re
from typing import Any

import httpx
import openai
import pytest

from tests.support.fixtures import http_fixture, openai_fixture, server_fixture
from tests.support.http import CHAT, COMPLETIONS, post_sse, sse_events, stream_post
from tests.support.server import SimServer

FINGERPRINT_RE = r"vllm-0\.32\.0-[0-9a-f]{8}"
MESSAGES = [{"role": "user", "content": "Hello there"}]

framed = server_fixture(["--max-num-seqs", "16"])
client = http_fixture("framed")
sdk = openai_fixture("framed")


def chat(**extra: Any) -> dict[str, Any]:
    return {"messages": MESSAGES, "stream": True, **extra}


def completion(**extra: Any) -> dict[str, Any]:
    return {"prompt": "Hello there", "stream": True, **extra}


def test_a_chat_stream_has_one_chunk_per_token_and_the_last_one_finishes(
    client: httpx.Client,
) -> None:
    chunks = stream_post(client, CHAT, chat(max_tokens=5, ignore_eos=True)).chunks
    role, tokens = chunks[0], chunks[1:]
    assert role["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    assert set(role) == {"id", "object", "created", "model", "choices"} | {
        "prompt_token_ids",
        "prompt_text",
    }
    assert len(tokens) == 5
    for chunk in tokens[:-1]:
        assert set(chunk) == {"id", "object", "created", "model", "choices"}
        (choice,) = chunk["choices"]
        assert set(choice) == {"index", "delta", "logprobs", "finish_reason", "token_ids"}
        assert choice["finish_reason"] is None
        assert choice["delta"]["content"]
    last = tokens[-1]["choices"][0]
    assert last["delta"]["content"], "the finish rides on the last token, not after it"
    assert last["finish_reason"] == "length"
    assert last["stop_reason"] is None
    assert re.fullmatch(FINGERPRINT_RE, tokens[-1]["system_fingerprint"])


def _natural_stop(client: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a stream the model ended by itself (random lengths: a few tries), the
    usage chunk left out."""
    for _ in range(40):
        chunks = [c for c in stream_post(client, path, body).chunks if c["choices"]]
        if chunks[-1]["choices"][0]["finish_reason"] == "stop":
            return chunks
    raise AssertionError("no answer ended by itself in 40 tries")


def test_a_natural_stop_is_an_end_of_sequence_chunk_counted_in_usage(
    client: httpx.Client,
) -> None:
    body = chat(max_tokens=50, stream_options={"include_usage": True})
    tokens = _natural_stop(client, CHAT, body)[1:]
    usage_chunk = stream_post(client, CHAT, body).chunks[-1]
    eos = tokens[-1]["choices"][0]
    assert eos["delta"] == {}, "vLLM 0.32 sends the end-of-sequence step's delta empty"
    assert (eos["finish_reason"], eos["stop_reason"]) == ("stop", None)
    assert all(chunk["choices"][0]["delta"]["content"] for chunk in tokens[:-1])
    assert "system_fingerprint" not in tokens[-1], "with a usage chunk, it carries it"
    assert usage_chunk["choices"] == []
    assert set(usage_chunk["usage"]) == {"prompt_tokens", "total_tokens", "completion_tokens"}
    assert re.fullmatch(FINGERPRINT_RE, usage_chunk["system_fingerprint"])


def test_usage_counts_every_token_chunk_the_end_of_sequence_included(
    client: httpx.Client,
) -> None:
    body = chat(max_tokens=50, stream_options={"include_usage": True})
    for _ in range(40):
        chunks = stream_post(client, CHAT, body).chunks
        tokens, usage_chunk = chunks[1:-1], chunks[-1]
        if tokens[-1]["choices"][0]["finish_reason"] == "stop":
            assert usage_chunk["usage"]["completion_tokens"] == len(tokens)
            return
    raise AssertionError("no answer ended by itself in 40 tries")


def test_a_completion_stream_has_one_chunk_per_token(client: httpx.Client) -> None:
    chunks = stream_post(client, COMPLETIONS, completion(max_tokens=4, ignore_eos=True)).chunks
    assert len(chunks) == 4
    keys = {"index", "text", "logprobs", "finish_reason", "stop_reason"}
    for chunk in chunks:
        assert "usage" not in chunk
        (choice,) = chunk["choices"]
        assert set(choice) == keys | {"prompt_token_ids", "token_ids"}
        assert choice["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]
    assert re.fullmatch(FINGERPRINT_RE, chunks[-1]["system_fingerprint"])
    assert all("system_fingerprint" not in chunk for chunk in chunks[:-1])


def test_a_completion_stopped_naturally_ends_with_an_empty_text_chunk(
    client: httpx.Client,
) -> None:
    chunks = _natural_stop(client, COMPLETIONS, completion(max_tokens=50))
    last = chunks[-1]["choices"][0]
    assert (last["text"], last["stop_reason"]) == ("", None)
    assert all(chunk["choices"][0]["text"] for chunk in chunks[:-1])


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_continuous_usage_stats_put_running_usage_on_every_chunk(
    client: httpx.Client, path: str
) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    body = (chat if path == CHAT else completion)(
        max_tokens=4, ignore_eos=True, stream_options=options
    )
    chunks = stream_post(client, path, body).chunks
    running = [chunk["usage"]["completion_tokens"] for chunk in chunks[:-1]]
    expected = [0, 1, 2, 3, 4] if path == CHAT else [1, 2, 3, 4]  # chat: the role chunk
    assert running == expected
    prompt = chunks[-1]["usage"]["prompt_tokens"]
    for chunk in chunks[:-1]:
        usage = chunk["usage"]
        # vLLM's running usage names the completion details (null); the final usage does not.
        assert set(usage) == {
            "prompt_tokens",
            "total_tokens",
            "completion_tokens",
            "completion_tokens_details",
        }, usage
        assert usage["completion_tokens_details"] is None
        assert usage["prompt_tokens"] == prompt
        assert usage["total_tokens"] == prompt + usage["completion_tokens"]
    assert chunks[-1]["usage"] == {
        "prompt_tokens": prompt,
        "total_tokens": prompt + 4,
        "completion_tokens": 4,
    }


def test_without_include_usage_continuous_stats_add_nothing(client: httpx.Client) -> None:
    body = chat(max_tokens=3, ignore_eos=True, stream_options={"continuous_usage_stats": True})
    chunks = stream_post(client, CHAT, body).chunks
    assert all("usage" not in chunk for chunk in chunks)


def test_n_choices_each_finish_on_their_last_token(client: httpx.Client) -> None:
    chunks = stream_post(client, CHAT, chat(max_tokens=3, ignore_eos=True, n=3)).chunks
    for index in range(3):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert len(mine) == 4  # the role chunk and three tokens
        assert [choice["finish_reason"] for choice in mine] == [None, None, None, "length"]
    fingerprinted = [c for c in chunks if "system_fingerprint" in c]
    assert fingerprinted == [chunks[-1]], "only the stream's last chunk carries it"


def test_return_token_ids_gives_each_chunk_its_token(client: httpx.Client) -> None:
    body = chat(max_tokens=3, ignore_eos=True, return_token_ids=True)
    chunks = stream_post(client, CHAT, body).chunks
    prompt_ids = chunks[0]["prompt_token_ids"]
    assert isinstance(prompt_ids, list) and prompt_ids
    assert all(isinstance(token, int) for token in prompt_ids)
    for chunk in chunks[1:]:
        ids = chunk["choices"][0]["token_ids"]
        assert isinstance(ids, list) and len(ids) == 1


def test_the_sdk_reads_the_finish_from_the_last_token(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model="test-model",
        messages=[{"role": "user", "content": "Hello there"}],
        max_tokens=4,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, None, "length"]
    assert chunks[-1].choices[0].delta.content


@pytest.mark.timing
def test_the_end_of_sequence_step_comes_one_inter_token_latency_after_the_last_text() -> None:
    """The step that ends an answer is a decode step like any other: benchmark tools must
    see one more inter-token gap of the configured size, never a ~0 ms one."""
    args = ["--time-to-first-token", "10ms", "--inter-token-latency", "100ms"]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=30) as http:
        for _ in range(20):
            reply = post_sse(http, CHAT, chat(max_tokens=6))
            events, done = sse_events(reply.data)
            assert done
            if events[-1][1]["choices"][0]["finish_reason"] == "stop":
                break
        else:
            raise AssertionError("no answer ended by itself in 20 tries")
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(events[1:])]
        assert gaps, "at least one text token before the end of sequence"
        assert all(0.06 < gap < 0.4 for gap in gaps), gaps


def test_choices_are_interleaved_as_vllms_steps_make_them(client: httpx.Client) -> None:
    """All role chunks first, then one token of each choice per step, as vLLM sends them."""
    chunks = stream_post(client, CHAT, chat(max_tokens=3, ignore_eos=True, n=2)).chunks
    assert [chunk["choices"][0]["index"] for chunk in chunks] == [0, 1] * 4
    assert all("role" in chunk["choices"][0]["delta"] for chunk in chunks[:2])
