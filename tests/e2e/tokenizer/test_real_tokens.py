"""With a model's own tokenizer: generated answers are made of that vocabulary's ids, the
usage counts exactly the ids streamed, their decoding is the streamed text, and KV events
hash the real, template-rendered prompt ids."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from tests.support.health_probe import HealthProbe, read_niced
from tests.support.http import post_sse
from tests.support.kv import Stored, chain
from tests.support.kv import kv_server as kv_server_of
from tests.support.server import SimServer

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant. Answer in one sentence."},
    {"role": "user", "content": "Héllo! What's the weather like in Zürich, 今日は? 🙂"},
]


@pytest.fixture(scope="module")
def qwen(hf_models: dict[str, Path]) -> Path:
    return hf_models["qwen"]


@pytest.fixture(scope="module")
def client(qwen: Path) -> Iterator[httpx.Client]:
    with (
        SimServer(["--served-model-name", "tiny"], model=str(qwen)) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as http,
    ):
        yield http


def _stream(
    client: httpx.Client, path: str, body: dict[str, Any]
) -> tuple[str, list[int], dict[str, Any]]:
    """The streamed text, the streamed token ids, and the usage of the last chunk."""
    reply = post_sse(
        client,
        path,
        {
            **body,
            "model": "tiny",
            "stream": True,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert reply.status == 200, reply.body
    text, ids, usage = "", list[int](), dict[str, Any]()
    for _, data in reply.data:
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            ids += choice.get("token_ids") or (choice.get("delta") or {}).get("token_ids") or []
    return text, ids, usage


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 40, "ignore_eos": True}),
        ("/v1/completions", {"prompt": "Tell me a story", "max_tokens": 40, "ignore_eos": True}),
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 200, "seed": 3}),
        ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 200, "seed": 5}),
    ],
)
def test_streamed_ids_are_the_usage_and_decode_to_the_text(
    client: httpx.Client, qwen: Path, path: str, body: dict[str, Any]
) -> None:
    reference = AutoTokenizer.from_pretrained(str(qwen))
    text, ids, usage = _stream(client, path, body)
    assert usage["completion_tokens"] == len(ids) > 0
    assert all(0 <= token < len(reference) for token in ids)
    if body.get("ignore_eos"):
        assert len(ids) == body["max_tokens"]
    detokenized = client.post("/detokenize", json={"tokens": ids}).json()["prompt"]
    eos = reference.convert_tokens_to_ids("<|im_end|>")
    if ids[-1] == eos:  # ended by the model: its end-of-sequence token adds no text
        assert detokenized == text + "<|im_end|>"
    else:
        assert detokenized == text


def test_non_streamed_answer_decodes_to_its_text(client: httpx.Client, qwen: Path) -> None:
    reference = AutoTokenizer.from_pretrained(str(qwen))
    body = {
        "model": "tiny",
        "messages": MESSAGES,
        "max_tokens": 30,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    answer = client.post("/v1/chat/completions", json=body).json()
    choice = answer["choices"][0]
    assert reference.decode(choice["token_ids"]) == choice["message"]["content"]
    assert answer["usage"]["completion_tokens"] == len(choice["token_ids"]) == 30


def test_tool_call_arguments_are_real_tokens(client: httpx.Client, qwen: Path) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    body = {
        "model": "tiny",
        "messages": MESSAGES,
        "tools": tools,
        "tool_choice": "required",
        "return_token_ids": True,
    }
    answer = client.post("/v1/chat/completions", json=body).json()
    choice = answer["choices"][0]
    arguments = "".join(call["function"]["arguments"] for call in choice["message"]["tool_calls"])
    reference = AutoTokenizer.from_pretrained(str(qwen))
    ids = choice["token_ids"]
    assert answer["usage"]["completion_tokens"] == len(ids)
    assert reference.decode(ids, skip_special_tokens=True) == arguments


def test_kv_block_hashes_are_those_of_the_real_template_ids(qwen: Path) -> None:
    reference = AutoTokenizer.from_pretrained(str(qwen))
    rendered = reference.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True)
    expected: list[int] = list(rendered if isinstance(rendered, list) else rendered["input_ids"])
    assert len(expected) >= 32
    model = str(qwen)
    with kv_server_of(model=model) as (_sim, sub, http):
        answer = http.post(
            "/v1/chat/completions", json={"model": model, "messages": MESSAGES, "max_tokens": 1}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["prompt_tokens"] == len(expected)
        full = len(expected) // 16
        events = sub.take_events(1)
        assert events == [
            Stored(chain(expected, model=model), None, expected[: full * 16], 16, None, "GPU", None)
        ]


@pytest.mark.timing
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_long_prompt_is_tokenized_off_the_event_loop(qwen: Path, path: str) -> None:
    """A model tokenizer takes about a millisecond per kilobyte and holds the GIL: a 60 KB
    prompt (echoed back in echo mode) is read on the worker thread, with the encoder's
    GIL-free call, so /health keeps answering meanwhile."""
    text = " ".join(f"w{i} and more text, {i * 7}." for i in range(2200))
    assert 55_000 < len(text) < 64 * 1024  # under the simulated tokenizer's own bound
    args = ["--mode", "echo", "--max-model-len", "200000", "--served-model-name", "tiny"]
    body: dict[str, Any] = {"model": "tiny", "max_tokens": 1}
    if path == "/v1/completions":
        body["prompt"] = text
    else:
        body["messages"] = [{"role": "user", "content": text}]
    payload = json.dumps(body).encode()
    with SimServer(args, model=str(qwen)) as sim:
        for _ in range(2):  # one slow probe on a shared machine may be the machine
            with HealthProbe(sim.port) as probe:
                status, _size = read_niced(sim.url + path, payload)
            if probe.worst < 0.050:
                break
        assert status == 200 and probe.count > 0
        assert probe.worst < 0.050, probe.worst
        headers = {"content-type": "application/json"}
        answer = httpx.post(sim.url + path, content=payload, headers=headers, timeout=60).json()
        choice = answer["choices"][0]
        echoed = choice["text"] if "text" in choice else choice["message"]["content"]
        assert echoed == text
