"""Malformed bodies on both endpoints: always a 4xx with the error envelope, never a 500,
and the server keeps answering. Hypothesis drives the wrong-type and junk matrices."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.errors import assert_openai_error, assert_validation_error
from tests.support.fuzz import fuzz_settings, json_scalars, json_trees
from tests.support.http import (
    CHAT,
    COMPLETIONS,
    chat_body,
    parse_sse,
    post,
)
from tests.support.server import SimServer

FUZZ = fuzz_settings(120)

scalars = json_scalars(12)
json_values = json_trees(scalars)


def _is_int(value: object) -> bool:
    return type(value) is int


def _integral_float(value: object) -> bool:
    # 5.0 for an int is lax-accepted by vLLM (pydantic) and rejected by the reference (Go):
    # left out of the matrix either way.
    return type(value) is float and value.is_integer()


WRONG = {
    "str": json_values.filter(lambda v: v is not None and not isinstance(v, str)),
    "bool": json_values.filter(lambda v: v is not None and not isinstance(v, bool)),
    "int": json_values.filter(
        lambda v: v is not None and not _is_int(v) and not _integral_float(v)
    ),
    "list": json_values.filter(lambda v: v is not None and not isinstance(v, list)),
    "object": json_values.filter(lambda v: v is not None and not isinstance(v, dict)),
    "content": json_values.filter(lambda v: v is not None and not isinstance(v, str | list)),
}

CHAT_FIELDS = {
    "model": "str",
    "messages": "list",
    "stream": "bool",
    "stream_options": "object",
    "n": "int",
    "max_tokens": "int",
    "max_completion_tokens": "int",
    "ignore_eos": "bool",
    "logprobs": "bool",
    "top_logprobs": "int",
}
COMPLETION_FIELDS = {
    "model": "str",
    "stream": "bool",
    "stream_options": "object",
    "n": "int",
    "max_tokens": "int",
    "ignore_eos": "bool",
    "logprobs": "int",
}


@pytest.fixture(scope="module")
def target() -> Iterator[SimServer]:
    with SimServer(["--max-num-seqs", "64"]) as sim:
        yield sim


@pytest.fixture(scope="module")
def client(target: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=target.url, timeout=30) as http:
        yield http


def _field_and_value(fields: dict[str, str]) -> st.SearchStrategy[tuple[str, Any]]:
    return st.sampled_from(sorted(fields)).flatmap(
        lambda name: st.tuples(st.just(name), WRONG[fields[name]])
    )


# ---------------------------------------------------------------- wrong types


@FUZZ
@given(case=_field_and_value(CHAT_FIELDS))
def test_chat_wrong_type_for_each_field(client: httpx.Client, case: tuple[str, Any]) -> None:
    name, value = case
    body = {**chat_body(max_tokens=2), name: value}
    assert_validation_error(post(client, CHAT, body), f"body.{name}")


@FUZZ
@given(case=_field_and_value(COMPLETION_FIELDS))
def test_completions_wrong_type_for_each_field(client: httpx.Client, case: tuple[str, Any]) -> None:
    name, value = case
    body = {"prompt": "Hello", "max_tokens": 2, name: value}
    assert_validation_error(post(client, COMPLETIONS, body), f"body.{name}")


@FUZZ
@given(
    case=st.sampled_from(["role", "content", "item", "include_usage"]).flatmap(
        lambda where: st.tuples(
            st.just(where),
            {
                "role": WRONG["str"],
                "content": WRONG["content"],
                "item": WRONG["object"],
                "include_usage": WRONG["bool"],
            }[where],
        )
    )
)
def test_chat_wrong_nested_types(client: httpx.Client, case: tuple[str, Any]) -> None:
    where, value = case
    body: dict[str, Any] = chat_body(max_tokens=2)
    if where == "role":
        body["messages"] = [{"role": value, "content": "x"}]
        param = "body.messages.0.role"
    elif where == "content":
        body["messages"] = [{"role": "user", "content": "a"}, {"role": "user", "content": value}]
        param = "body.messages.1.content"
    elif where == "item":
        body["messages"] = [{"role": "user", "content": "a"}, value]
        param = "body.messages.1"
    else:
        body["stream_options"] = {"include_usage": value}
        body["stream"] = True
        param = "body.stream_options.include_usage"
    assert_validation_error(post(client, CHAT, body), param)


def _valid_prompt(value: object) -> bool:
    def token(v: object) -> bool:
        return type(v) is int and 0 <= v < 2**32

    if isinstance(value, str):
        return True
    if not isinstance(value, list):
        return False
    return (
        all(isinstance(v, str) for v in value)
        or all(token(v) for v in value)
        or all(isinstance(v, list) and all(token(i) for i in v) for v in value)
    )


@FUZZ
@given(prompt=json_values.filter(lambda v: not _valid_prompt(v)))
def test_completions_invalid_prompt(client: httpx.Client, prompt: object) -> None:
    error = assert_openai_error(post(client, COMPLETIONS, {"prompt": prompt, "max_tokens": 2}), 400)
    assert error["param"] == "prompt"
    assert "prompt" in error["message"]


# --------------------------------------------------------------------- junk


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_junk_bytes(client: httpx.Client, raw: bytes) -> None:
    for path in (CHAT, COMPLETIONS):
        assert_openai_error(post(client, path, raw))


@FUZZ
@given(value=json_values.filter(lambda v: not isinstance(v, dict)))
def test_non_object_json(client: httpx.Client, value: object) -> None:
    for path in (CHAT, COMPLETIONS):
        response = post(client, path, json.dumps(value))
        assert_validation_error(response, "body")  # FastAPI's: no object, or (null) no body


ANY_FIELD = st.sampled_from([*CHAT_FIELDS, *COMPLETION_FIELDS, "prompt"]) | st.text(max_size=6)


@settings(FUZZ, max_examples=200)
@given(
    body=st.dictionaries(ANY_FIELD, json_values, max_size=6),
    path=st.sampled_from([CHAT, COMPLETIONS]),
)
def test_arbitrary_objects_never_fail_the_server(
    client: httpx.Client, body: dict[str, Any], path: str
) -> None:
    response = post(client, path, body)
    if response.status_code == 200:
        if response.headers["content-type"].startswith("text/event-stream"):
            parse_sse(response.content)
        else:
            assert response.json()["choices"]
    else:
        assert_openai_error(response)


# ------------------------------------------------------------------- table

DEPTH = 100_000


def _deep(prefix: bytes, suffix: bytes, depth: int = DEPTH) -> bytes:
    return prefix + b"[" * depth + b"]" * depth + suffix


MALFORMED: list[tuple[str, str, bytes]] = [
    ("deep-unknown-field", CHAT, _deep(b'{"x":', b',"messages":[]}')),
    ("deep-messages", CHAT, _deep(b'{"messages":', b"}")),
    ("deep-content", CHAT, _deep(b'{"messages":[{"role":"user","content":', b"}]}")),
    ("deep-objects", CHAT, b'{"x":' + b'{"a":' * DEPTH + b"1" + b"}" * DEPTH + b',"messages":[]}'),
    ("deep-prompt", COMPLETIONS, _deep(b'{"prompt":', b"}")),
    ("depth-1000-unknown-field", CHAT, _deep(b'{"x":', b',"messages":[]}', 1000)),
    ("depth-1000-prompt", COMPLETIONS, _deep(b'{"prompt":', b"}", 1000)),
    ("deep-unknown-completions", COMPLETIONS, _deep(b'{"x":', b',"prompt":"a"}')),
    ("float-overflow-n", CHAT, b'{"messages":[],"n":1e400}'),
    ("int-overflow-n", CHAT, b'{"messages":[],"n":' + b"9" * 400 + b"}"),
    ("int-overflow-max-tokens", CHAT, b'{"messages":[],"max_tokens":' + b"9" * 400 + b"}"),
    (
        "int-overflow-top",
        CHAT,
        b'{"messages":[],"logprobs":true,"top_logprobs":1' + b"0" * 40 + b"}",
    ),
    ("int-overflow-logprobs", COMPLETIONS, b'{"prompt":"a","logprobs":1' + b"0" * 400 + b"}"),
    ("int-overflow-prompt-id", COMPLETIONS, b'{"prompt":[1' + b"0" * 400 + b"]}"),
    ("int-overflow-max-tokens-c", COMPLETIONS, b'{"prompt":"a","max_tokens":' + b"9" * 30 + b"}"),
    ("negative-zero-n", CHAT, b'{"messages":[],"n":-0.0}'),
    ("exponent-n", CHAT, b'{"messages":[],"n":1e2}'),
    ("nan", CHAT, b'{"messages":[],"n":NaN}'),
    ("infinity", COMPLETIONS, b'{"prompt":"a","max_tokens":Infinity}'),
    ("lone-surrogate", CHAT, b'{"messages":[{"role":"user","content":"\\ud800"}]}'),
    ("invalid-utf8", CHAT, b'{"messages":[{"role":"user","content":"\xc3\x28"}]}'),
    ("invalid-utf8-c", COMPLETIONS, b'{"prompt":"\xff"}'),
    ("bad-escape", COMPLETIONS, b'{"prompt":"\\x41"}'),
    ("trailing-garbage", CHAT, b'{"messages":[]} xyz'),
    ("two-documents", COMPLETIONS, b'{"prompt":"a"}{"prompt":"b"}'),
    ("single-quotes", CHAT, b"{'messages':[]}"),
    ("comment", CHAT, b'{"messages":[] /* c */}'),
    ("null-messages", CHAT, b'{"messages":null}'),
    ("null-message", CHAT, b'{"messages":[null]}'),
    ("null-role", CHAT, b'{"messages":[{"role":null,"content":"x"}]}'),
    ("missing-role", CHAT, b'{"messages":[{"content":"x"}]}'),
    ("null-prompt", COMPLETIONS, b'{"prompt":null}'),
    ("null-in-prompt", COMPLETIONS, b'{"prompt":["a",null]}'),
    ("null-id", COMPLETIONS, b'{"prompt":[1,null]}'),
    ("bool-ids", COMPLETIONS, b'{"prompt":[true,false]}'),
    ("empty-body", CHAT, b""),
    ("whitespace-body", COMPLETIONS, b"   \n\t "),
    ("nul-byte-body", CHAT, b"\x00"),
    ("bom-body", CHAT, b"\xef\xbb\xbf\xef\xbb\xbf{"),
]


@pytest.mark.parametrize(
    ("path", "raw"), [(path, raw) for _, path, raw in MALFORMED], ids=[n for n, _, _ in MALFORMED]
)
def test_malformed_table(client: httpx.Client, path: str, raw: bytes) -> None:
    assert_openai_error(post(client, path, raw))


ODD_BUT_VALID: list[tuple[str, str, dict[str, Any] | bytes]] = [
    ("nul-char", CHAT, chat_body("a\u0000b", max_tokens=2)),
    ("rtl-and-zero-width", CHAT, chat_body("\u202eabc\u200b\u200d", max_tokens=2)),
    ("astral-keys", CHAT, {**chat_body(max_tokens=2), "🙂": {"ключ": ["値"]}}),
    ("astral-role", CHAT, {"messages": [{"role": "𝓊𝓈ℯ𝓇", "content": "hi"}], "max_tokens": 2}),
    ("content-null", CHAT, {"messages": [{"role": "user", "content": None}], "max_tokens": 2}),
    ("long-content", CHAT, chat_body("a" * 1_000_000, max_tokens=2)),
    ("many-messages", CHAT, {"messages": [{"role": "u", "content": "x"}] * 100, "max_tokens": 1}),
    ("unicode-prompt", COMPLETIONS, {"prompt": "\u0000\ud7ff\ue000\U0010ffff", "max_tokens": 2}),
    ("many-prompts", COMPLETIONS, {"prompt": ["a"] * 500, "max_tokens": 1}),
    ("max-token-id", COMPLETIONS, {"prompt": [2**32 - 1] * 3, "max_tokens": 1}),
    # As in Python's json (and so vLLM): for a duplicate key the last one wins.
    ("duplicate-keys", CHAT, b'{"messages":5,"messages":[{"role":"user","content":"x"}]}'),
    (
        "duplicate-keys-valid",
        CHAT,
        b'{"messages":[{"role":"user","content":"x"}],"max_tokens":0,"max_tokens":2}',
    ),
]


@pytest.mark.parametrize(
    ("path", "body"), [(p, b) for _, p, b in ODD_BUT_VALID], ids=[n for n, _, _ in ODD_BUT_VALID]
)
def test_odd_but_valid_bodies(client: httpx.Client, path: str, body: Any) -> None:
    response = post(client, path, body)
    assert response.status_code == 200, response.text[:300]
    assert response.json()["choices"]


def test_server_still_answers(client: httpx.Client, target: SimServer) -> None:
    """Runs last in this module: after every malformed body the server is healthy."""
    assert client.get("/health").status_code == 200
    reply = post(client, CHAT, chat_body("Hello", max_tokens=3)).json()
    assert reply["object"] == "chat.completion"
    reply = post(client, COMPLETIONS, {"prompt": "Hello", "max_tokens": 3}).json()
    assert reply["object"] == "text_completion"
    metrics = client.get("/metrics").text.splitlines()
    assert f'vllm:num_requests_running{{engine="0",model_name="{target.model}"}} 0.0' in metrics
    assert f'vllm:num_requests_waiting{{engine="0",model_name="{target.model}"}} 0.0' in metrics
    assert target.process is not None and target.process.poll() is None
