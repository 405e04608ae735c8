"""A real tokenizer's think markers with a reasoning parser: the model generates its own
`</think>` where the reasoning stops (counted in the output, shown in neither part, no
stream chunk of its own), and deepseek_r1 refuses to start without both markers, as vLLM."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from tests.support.http import CHAT, SSE, chat_body, json_ok, post, stream_post
from tests.support.server import SimServer, run_cli

MAX_TOKENS = 10
REASONING = MAX_TOKENS // 2  # --reasoning-ratio's default, 0.5


@pytest.fixture(scope="module")
def thinking_model(hf_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The qwen folder with `<think>` and `</think>` added as vocabulary entries, as Qwen3's
    tokenizer has them."""
    folder = tmp_path_factory.mktemp("think") / "qwen-think"
    shutil.copytree(hf_models["qwen"], folder)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.add_tokens(["<think>", "</think>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def think_end(thinking_model: Path) -> int:
    token_id = Tokenizer.from_file(str(thinking_model / "tokenizer.json")).token_to_id("</think>")
    assert token_id is not None
    return int(token_id)


@pytest.fixture(scope="module")
def qwen3(thinking_model: Path) -> Iterator[SimServer]:
    with SimServer(["--reasoning-parser", "qwen3"], model=str(thinking_model)) as sim:
        yield sim


def _body(sim: SimServer, **extra: Any) -> dict[str, Any]:
    return chat_body("Hello", model=sim.model, max_tokens=MAX_TOKENS, ignore_eos=True, **extra)


def test_the_answer_holds_the_models_own_end_of_thinking(qwen3: SimServer, think_end: int) -> None:
    with httpx.Client(base_url=qwen3.url, timeout=30) as client:
        answer = json_ok(post(client, CHAT, _body(qwen3, return_token_ids=True)))
    choice = answer["choices"][0]
    ids = choice["token_ids"]
    assert len(ids) == MAX_TOKENS and ids[REASONING] == think_end  # generated, and counted
    assert answer["usage"]["completion_tokens"] == MAX_TOKENS
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": REASONING}
    message = choice["message"]
    assert "</think>" not in message["reasoning"] and "</think>" not in message["content"]


def test_the_marker_sends_no_chunk(qwen3: SimServer) -> None:
    with httpx.Client(base_url=qwen3.url, timeout=30) as client:
        sse: SSE = stream_post(client, CHAT, _body(qwen3, stream=True))
    deltas = [chunk["choices"][0]["delta"] for chunk in sse.chunks if chunk.get("choices")]
    reasoning = [d for d in deltas if d.get("reasoning")]
    content = [d for d in deltas if d.get("content")]
    assert len(reasoning) == REASONING
    assert len(content) == MAX_TOKENS - REASONING - 1  # the marker's token says nothing


def test_deepseek_r1_needs_both_markers(hf_models: dict[str, Path]) -> None:
    result = run_cli(["--model", hf_models["qwen"], "--reasoning-parser", "deepseek_r1"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "vllm-sim: invalid configuration: DeepSeekR1ReasoningParser reasoning parser could "
        "not locate think start/end tokens in the tokenizer!"
    ]


def test_deepseek_r1_starts_with_them(thinking_model: Path) -> None:
    args = ["--reasoning-parser", "deepseek_r1"]
    with SimServer(args, model=str(thinking_model)) as sim, httpx.Client(base_url=sim.url) as http:
        answer = json_ok(post(http, CHAT, _body(sim)))
    assert answer["choices"][0]["message"]["reasoning"]


# A template that writes a closed empty think block when thinking is off, as Qwen3's does.
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}"
)


@pytest.fixture(scope="module")
def templated(thinking_model: Path) -> Iterator[SimServer]:
    args = ["--reasoning-parser", "qwen3", "--chat-template", THINK_TEMPLATE]
    with SimServer(args, model=str(thinking_model)) as sim:
        yield sim


def _prompt_tokens(sim: SimServer, path: str, body: dict[str, Any]) -> int:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        usage = json_ok(post(client, path, {"model": sim.model, **body}))["usage"]
    return int(usage.get("prompt_tokens", usage.get("input_tokens", 0)))


@pytest.mark.parametrize(
    ("path", "on", "off"),
    [
        (CHAT, {"reasoning_effort": "low"}, {"reasoning_effort": "none"}),
        ("/v1/responses", {"reasoning": {"effort": "low"}}, {"reasoning": {"effort": "none"}}),
        ("/v1/messages", {"thinking": {"type": "adaptive"}}, {"thinking": {"type": "disabled"}}),
    ],
)
def test_thinking_off_reaches_the_template(
    templated: SimServer, path: str, on: dict[str, Any], off: dict[str, Any]
) -> None:
    """vLLM hands a reasoning effort (and Anthropic's disabled thinking, an effort of "none")
    to the chat template as enable_thinking: the closed think block is in the prompt."""
    if path == CHAT:
        base: dict[str, Any] = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    elif path == "/v1/responses":
        base = {"input": "Hi", "max_output_tokens": 2}
    else:
        base = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    closed = _prompt_tokens(templated, path, {**base, **off})
    assert closed > _prompt_tokens(templated, path, {**base, **on})


def test_the_marker_takes_no_token_of_the_answer(thinking_model: Path, qwen3: SimServer) -> None:
    """The marker goes between the reasoning and the content: the two read as the same
    answer without a parser, less its last token (the marker took its place in the count)."""
    body = {"seed": 7, "return_token_ids": True}
    plain = SimServer([], model=str(thinking_model))
    with plain, httpx.Client(base_url=plain.url, timeout=30) as client:
        whole = json_ok(post(client, CHAT, _body(plain, **body)))["choices"][0]
    with httpx.Client(base_url=qwen3.url, timeout=30) as client:
        split = json_ok(post(client, CHAT, _body(qwen3, **body)))["choices"][0]
    ids = whole["token_ids"]
    assert split["token_ids"] == [
        *ids[:REASONING],
        split["token_ids"][REASONING],
        *ids[REASONING:-1],
    ]
    message = split["message"]
    assert whole["message"]["content"].startswith(message["reasoning"] + message["content"])
