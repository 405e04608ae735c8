"""--reasoning-parser: chat answers open with a reasoning part, as vLLM 0.32's reasoning
parsers give it: `message.reasoning` beside `content` (null when nothing follows the
reasoning), streamed `delta.reasoning` chunks before the content ones, and
`completion_tokens_details.reasoning_tokens` in every usage whenever a parser is set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.http import CHAT, SSE, chat_body, json_ok, post, stream_post
from tests.support.server import SimServer, run_cli

RATIO = 0.5


@pytest.fixture(scope="module")
def qwen3() -> Iterator[SimServer]:
    with SimServer(["--reasoning-parser", "qwen3", "--reasoning-ratio", str(RATIO)]) as sim:
        yield sim


def _chat(sim: SimServer, **extra: Any) -> dict[str, Any]:
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return json_ok(post(client, CHAT, chat_body("Hello", model=sim.model, **extra)))


def _stream(sim: SimServer, **extra: Any) -> SSE:
    body = chat_body("Hello", model=sim.model, ignore_eos=True, stream=True, **extra)
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return stream_post(client, CHAT, body)


def test_the_answer_opens_with_its_reasoning(qwen3: SimServer) -> None:
    """The first half of the tokens is the reasoning, the rest the content; the usage
    counts the reasoning tokens."""
    answer = _chat(qwen3, max_tokens=10, ignore_eos=True)
    message = answer["choices"][0]["message"]
    assert message["reasoning"] and message["content"]
    assert "reasoning_content" not in message
    details = answer["usage"]["completion_tokens_details"]
    assert details == {"reasoning_tokens": int(10 * RATIO)}


def test_all_reasoning_leaves_content_null() -> None:
    """A ratio of 1: everything is reasoning, and content is null, as vLLM's answer whose
    reasoning never closed."""
    with SimServer(["--reasoning-parser", "deepseek_r1", "--reasoning-ratio", "1"]) as sim:
        answer = _chat(sim, max_tokens=6, ignore_eos=True)
    message = answer["choices"][0]["message"]
    assert message["content"] is None and message["reasoning"]
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 6}


def test_without_a_parser_there_is_no_reasoning(http: httpx.Client, sim: SimServer) -> None:
    answer = json_ok(post(http, CHAT, chat_body("Hello", model=sim.model, max_tokens=5)))
    assert answer["choices"][0]["message"]["reasoning"] is None
    assert answer["usage"]["completion_tokens_details"] is None


@pytest.mark.parametrize(
    ("extra", "reasoning"),
    [
        ({"chat_template_kwargs": {"enable_thinking": False}}, False),
        ({"reasoning_effort": "none"}, False),
        ({"chat_template_kwargs": {"enable_thinking": True}}, True),
        ({"reasoning_effort": "low"}, True),
    ],
)
def test_qwen3_reads_enable_thinking(
    qwen3: SimServer, extra: dict[str, Any], reasoning: bool
) -> None:
    """Thinking turned off (enable_thinking false, or reasoning effort "none"): no
    reasoning part, and reasoning_tokens 0 (the details stay, a parser is set)."""
    answer = _chat(qwen3, max_tokens=8, ignore_eos=True, **extra)
    message = answer["choices"][0]["message"]
    assert bool(message["reasoning"]) is reasoning
    expected = int(8 * RATIO) if reasoning else 0
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": expected}


def test_deepseek_r1_leaves_enable_thinking_to_the_template() -> None:
    """deepseek_r1 does not read enable_thinking: the reasoning part stays."""
    with SimServer(["--reasoning-parser", "deepseek_r1"]) as sim:
        answer = _chat(
            sim, max_tokens=8, ignore_eos=True, chat_template_kwargs={"enable_thinking": False}
        )
    assert answer["choices"][0]["message"]["reasoning"]


def test_the_stream_sends_reasoning_deltas_then_content(qwen3: SimServer) -> None:
    """After the role chunk, `reasoning` deltas, then `content` deltas; together they are
    the non-streamed answer's fields; the usage chunk counts the reasoning tokens, and so
    does each continuous usage."""
    sse = _stream(
        qwen3, max_tokens=10, stream_options={"include_usage": True, "continuous_usage_stats": True}
    )
    deltas = [c["choices"][0]["delta"] for c in sse.chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    kinds = [next(iter(d)) for d in deltas[1:] if d]
    switch = kinds.index("content")
    assert kinds[:switch] == ["reasoning"] * switch == ["reasoning"] * int(10 * RATIO)
    assert set(kinds[switch:]) == {"content"}
    usage = sse.chunks[-1]["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": int(10 * RATIO)}
    running = [c["usage"]["completion_tokens_details"] for c in sse.chunks if c["choices"]]
    assert running[-1] == {"reasoning_tokens": int(10 * RATIO)}


def test_the_openai_sdk_stream_helper_assembles_the_reasoning(qwen3: SimServer) -> None:
    """`chat.completions.stream(...).get_final_completion()` joins the reasoning deltas
    into the message's `reasoning`, the content deltas into its content. (No max_tokens:
    the helper refuses an answer cut by length.)"""
    client = openai.OpenAI(base_url=qwen3.url + "/v1", api_key="none")
    with client.chat.completions.stream(
        model=qwen3.model, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    reasoning = getattr(message, "reasoning", None)
    assert isinstance(reasoning, str) and reasoning
    plain = client.chat.completions.create(
        model=qwen3.model, messages=[{"role": "user", "content": "Hello"}]
    )
    assert plain.usage is not None and plain.usage.completion_tokens_details is not None
    assert plain.usage.completion_tokens_details.reasoning_tokens is not None


def test_include_reasoning_false_hides_it_but_counts_it(qwen3: SimServer) -> None:
    """include_reasoning false: the reasoning is generated and counted but not shown; not
    streamed, `reasoning` is null; streamed, no reasoning chunk, and every content delta
    says `"reasoning": null`, as vLLM's."""
    answer = _chat(qwen3, max_tokens=10, ignore_eos=True, include_reasoning=False)
    assert answer["choices"][0]["message"]["reasoning"] is None
    assert answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": int(10 * RATIO)}
    sse = _stream(
        qwen3, max_tokens=10, include_reasoning=False, stream_options={"include_usage": True}
    )
    deltas = [c["choices"][0]["delta"] for c in sse.chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert all(set(d) == {"content", "reasoning"} and d["reasoning"] is None for d in deltas[1:])
    assert len(deltas) - 1 == 10 - int(10 * RATIO)
    usage = sse.chunks[-1]["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": int(10 * RATIO)}


def test_all_reasoning_hidden_streams_only_the_role_and_the_finish() -> None:
    """Everything is reasoning and hidden: the role chunk, then an empty delta carrying the
    finish reason."""
    with SimServer(["--reasoning-parser", "qwen3", "--reasoning-ratio", "1"]) as sim:
        sse = _stream(sim, max_tokens=5, include_reasoning=False)
    choices = [c["choices"][0] for c in sse.chunks if c["choices"]]
    assert [c["delta"] for c in choices] == [{"role": "assistant", "content": ""}, {}]
    assert choices[-1]["finish_reason"] == "length"


def test_a_thinking_token_budget_caps_the_reasoning(qwen3: SimServer) -> None:
    """vLLM ends the thinking once the budget is spent; -1 is its "unlimited"."""
    capped = _chat(qwen3, max_tokens=10, ignore_eos=True, thinking_token_budget=2)
    assert capped["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    unlimited = _chat(qwen3, max_tokens=10, ignore_eos=True, thinking_token_budget=-1)
    assert unlimited["usage"]["completion_tokens_details"] == {"reasoning_tokens": int(10 * RATIO)}


def test_a_thinking_token_budget_needs_a_parser(http: httpx.Client, sim: SimServer) -> None:
    body = chat_body("Hello", model=sim.model, max_tokens=5, thinking_token_budget=3)
    response = post(http, CHAT, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "thinking_token_budget"
    assert "reasoning_config is not configured" in error["message"]


def test_an_unknown_parser_is_refused_with_vllms_list() -> None:
    """vLLM's name is openai_gptoss: gpt_oss is refused at launch, with the names it knows."""
    result = run_cli(["--model", "m", "--reasoning-parser", "gpt_oss"])
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.startswith("vllm-sim: invalid configuration: invalid reasoning parser: gpt_oss")
    assert "openai_gptoss" in line and "qwen3" in line and "\n" not in line
