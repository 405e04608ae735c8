"""The prefix-cache hit a client sees, on a real server, as vLLM reports it: the longest
cached run of leading full blocks, capped so that at least the last prompt token is
computed (vLLM's `max_cache_hit_length = num_tokens - 1`). A 48-token prompt repeated at
block size 16 finds 32 tokens cached, not 48; a 50-token one finds 48. Every API's usage
object and every /metrics family fed by the hit say the same."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.kv import BS, CHAT, COMPLETIONS, MESSAGES, MODEL, cached_tokens, distinct
from tests.support.metrics import (
    PREFILL_KV_COMPUTED,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_BY_SOURCE,
    PROMPT_CACHED,
    PROMPT_CACHED_BY_SOURCE,
    PROMPT_TOTAL,
    Metrics,
    wait_until_idle,
)
from tests.support.named_sse import one, stream_events
from tests.support.server import SimServer

RESPONSES = "/v1/responses"


def counters(metrics: Metrics) -> dict[str, float]:
    """Every engine series the prefix-cache hit feeds (and the prompt tokens around it)."""
    labels = {"model_name": MODEL}
    return {
        "queries": metrics.value(PREFIX_QUERIES, **labels),
        "hits": metrics.value(PREFIX_HITS, **labels),
        "prompt": metrics.value(PROMPT_TOTAL, **labels),
        "cached": metrics.value(PROMPT_CACHED, **labels),
        "local_cache_hit": metrics.value(PROMPT_BY_SOURCE, source="local_cache_hit", **labels),
        "local_compute": metrics.value(PROMPT_BY_SOURCE, source="local_compute", **labels),
        "device": metrics.value(PROMPT_CACHED_BY_SOURCE, source="device", **labels),
        "kv_computed": metrics.hist(PREFILL_KV_COMPUTED, **labels).sum,
    }


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def agree(prompt: int, cached: int) -> dict[str, float]:
    """What `prompt` tokens of which `cached` were found add to `counters`."""
    return {
        "queries": prompt,
        "hits": cached,
        "prompt": prompt,
        "cached": cached,
        "local_cache_hit": cached,
        "local_compute": prompt - cached,
        "device": cached,
        "kv_computed": prompt - cached,
    }


def total(*parts: dict[str, float]) -> dict[str, float]:
    return {name: sum(part[name] for part in parts) for name in parts[0]}


def test_completions_usage_and_metrics_report_the_capped_hit() -> None:
    first = distinct(1, 3)  # 48 tokens: three full blocks
    cases = [
        (first, 0),
        (first, 32),  # found whole: its last block is computed again
        (first, 32),
        (distinct(2, 3, extra=2), 0),  # 50 tokens
        (distinct(2, 3, extra=2), 48),  # its last token is past its full blocks
        (distinct(3, 1), 0),  # 16 tokens: one block, never a hit
        (distinct(3, 1), 0),
        (first[:32] + distinct(4, 1, extra=4), 32),  # shares only first's two blocks
        (first + distinct(5, 1), 48),  # extends first: all of its blocks hit
    ]
    args = ["--enable-prompt-tokens-details"]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        before = counters(wait_until_idle(client))
        for step, (prompt, cached) in enumerate(cases):
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
            response = client.post(COMPLETIONS, json=body)
            assert response.status_code == 200, response.text
            answer = response.json()
            assert answer["usage"]["prompt_tokens"] == len(prompt), step
            assert cached_tokens(answer) == cached, step
        after = counters(wait_until_idle(client))
        expected = total(*(agree(len(prompt), cached) for prompt, cached in cases))
        assert delta(before, after) == expected


def _chat(client: httpx.Client, text: str) -> tuple[int, int]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    response = client.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer["usage"]["prompt_tokens"], cached_tokens(answer)


def _responses(client: httpx.Client, text: str) -> tuple[int, int]:
    body = {"model": MODEL, "input": text, "max_output_tokens": 1}
    response = client.post(RESPONSES, json=body)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]


def _messages(client: httpx.Client, text: str) -> tuple[int, int]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    usage = one(stream_events(client, MESSAGES, body), "message_start")["message"]["usage"]
    return usage["input_tokens"], usage["cache_read_input_tokens"]


def test_every_api_reports_the_same_capped_hit_as_the_counters() -> None:
    """Chat, Responses and Messages, each with a prompt of whole blocks (where the cap
    shows: the last block is computed again), sent twice."""
    args = ["--enable-prompt-tokens-details"]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        before = counters(wait_until_idle(client))
        seen: list[dict[str, float]] = []
        for ask in (_chat, _responses, _messages):
            # Its own words (the APIs may render the same messages to the same tokens), one
            # more each time until the prompt is whole blocks.
            for words in range(40, 40 + 4 * BS):
                text = f"{words} {ask.__name__} " + " ".join(f"w{i}" for i in range(words))
                prompt, cached = ask(client, text)
                assert cached == 0
                seen.append(agree(prompt, cached))
                if prompt % BS == 0:
                    break
            assert prompt % BS == 0 and prompt >= 3 * BS, prompt
            again, cached = ask(client, text)
            assert again == prompt
            assert cached == prompt - BS, ask.__name__
            seen.append(agree(prompt, cached))
        after = counters(wait_until_idle(client))
        assert delta(before, after) == total(*seen)


def test_prompt_details_have_vllm_0_32s_shape() -> None:
    """As the vLLM 0.32 oracle answers (`make conformance`, prefix profile): with
    --enable-prompt-tokens-details every answer lists the details, a miss included; a chat
    answer counts the prompt tokens it stored as new full blocks (`created_cache_tokens`),
    a completion leaves that null; a stream's usage chunk drops the null keys."""
    args = ["--enable-prompt-tokens-details"]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        prompt = distinct(7, 3)  # 48 tokens: three full blocks
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
        details = [client.post(COMPLETIONS, json=body).json()["usage"]["prompt_tokens_details"]]
        details.append(client.post(COMPLETIONS, json=body).json()["usage"]["prompt_tokens_details"])
        assert details == [
            {"cached_tokens": 0, "created_cache_tokens": None, "multimodal_tokens": None},
            {"cached_tokens": 32, "created_cache_tokens": None, "multimodal_tokens": None},
        ]
        text = "created " + " ".join(f"w{i}" for i in range(60))
        chat = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 1}
        first = client.post(CHAT, json=chat).json()["usage"]
        full = first["prompt_tokens"] // BS * BS
        assert first["prompt_tokens_details"] == {
            "cached_tokens": 0,
            "created_cache_tokens": full,
            "multimodal_tokens": None,
        }
        again = client.post(CHAT, json=chat).json()["usage"]["prompt_tokens_details"]
        hit = (first["prompt_tokens"] - 1) // BS * BS
        assert again == {
            "cached_tokens": hit,
            "created_cache_tokens": full - hit,
            "multimodal_tokens": None,
        }
        streamed = {**chat, "stream": True, "stream_options": {"include_usage": True}}
        with client.stream("POST", CHAT, json=streamed) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: {")]
        usage = json.loads(lines[-1][len("data: ") :])["usage"]
        assert usage["prompt_tokens_details"] == {
            "cached_tokens": hit,
            "created_cache_tokens": full - hit,
        }
