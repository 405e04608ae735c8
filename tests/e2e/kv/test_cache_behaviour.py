"""Prefix-cache behaviour seen by clients: cached tokens, prefill time, metrics, capacity,
and cache-hit thresholds, on a real simulator."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.http import stream_usage, usage
from tests.support.kv import (
    BS,
    CHAT,
    COMPLETIONS,
    MESSAGES,
    MODEL,
    Stored,
    Subscriber,
    cached_tokens,
    chain,
    complete,
    distinct,
    kv_server,
    stream,
)
from tests.support.metrics import (
    CACHE_CONFIG,
    KV_USAGE,
    PREFIX_HITS,
    PREFIX_QUERIES,
    RUNNING,
    WAITING,
    Metrics,
    scrape,
    wait_until_idle,
)

THRESHOLD = "cache_threshold"
HEADER = "X-Cache-Threshold-Finish-Reason"


def counter(metrics: Metrics, name: str) -> float:
    """A per-model counter; 0 while the series does not exist yet."""
    found = [v for labels, v in metrics.series(name) if labels.get("model_name") == MODEL]
    assert len(found) <= 1, metrics.series(name)
    return found[0] if found else 0.0


def wait_for(client: httpx.Client, running: int, waiting: int, timeout: float = 5.0) -> Metrics:
    deadline = time.monotonic() + timeout
    while True:
        metrics = scrape(client)
        if (metrics.value(RUNNING), metrics.value(WAITING)) == (running, waiting):
            return metrics
        assert time.monotonic() < deadline, (metrics.value(RUNNING), metrics.value(WAITING))
        time.sleep(0.01)


@pytest.mark.timing
def test_repeated_prompt_is_a_cache_hit_and_prefills_faster() -> None:
    args = ["--latency-calculator", "per-token", "--prefill-time-per-token", "2ms"]
    args += ["--prefill-overhead", "5ms"]
    with kv_server(args) as (_sim, sub, client):
        prompt = distinct(1, 4)  # 64 tokens, 4 full blocks
        body = {
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": 1,
            "stream_options": {"include_usage": True},
        }
        first = stream(client, COMPLETIONS, body)
        again = [stream(client, COMPLETIONS, body) for _ in range(3)]
        for result in (first, *again):
            assert result.status == 200 and result.done
            assert result.first_data is not None
        assert cached_tokens(first.chunks[-1]) == 0
        # As in vLLM, the last token is always computed: the hit stops a block short of it.
        assert [cached_tokens(r.chunks[-1]) for r in again] == [48, 48, 48]
        # 5 ms + 64 x 2 ms without hits, 5 ms + 16 x 2 ms with the rest cached (the fastest
        # of three, so that one scheduling hiccup on a busy machine does not count).
        assert first.first_data is not None and first.first_data >= 0.128, first.first_data
        fastest = min(r.first_data for r in again if r.first_data is not None)
        assert fastest < 0.09, fastest
        hashes = chain(prompt)
        assert sub.take_events(1) == [Stored(hashes, None, prompt, BS, None, "GPU", None)]
        # Each repeat computes the last block again, and stores it again (as vLLM reports).
        last = Stored(hashes[3:], hashes[2], prompt[48:], BS, None, "GPU", None)
        assert sub.take_events(3) == [last, last, last]
        sub.quiet()


def test_prefix_metrics_and_kv_usage() -> None:
    args = ["--block-size", "32", "--kv-cache-size", "8", "--inter-token-latency", "100ms"]
    with kv_server(args, sync=False) as (_sim, _sub, client):
        start = scrape(client)
        assert start.value(CACHE_CONFIG) == 1
        assert start.value(CACHE_CONFIG, block_size="32", num_gpu_blocks="8") == 1
        assert start.value(KV_USAGE, model_name=MODEL) == 0
        queries, hits = counter(start, PREFIX_QUERIES), counter(start, PREFIX_HITS)

        prompt = distinct(1, 4, extra=6)  # 70 tokens: two full blocks of 32
        body = {"prompt": prompt, "max_tokens": 10, "ignore_eos": True}
        with ThreadPoolExecutor(1) as pool:
            long = pool.submit(stream, client, COMPLETIONS, body)
            running = wait_for(client, 1, 0)
            # Its two full prompt blocks and the partial third, which its output fills.
            assert running.value(KV_USAGE, model_name=MODEL) == 3 / 8
            assert counter(running, PREFIX_QUERIES) == queries + 70
            assert counter(running, PREFIX_HITS) == hits
            assert long.result(timeout=10).status == 200
        idle = wait_until_idle(client)
        assert idle.value(KV_USAGE, model_name=MODEL) == 0

        answer = complete(client, prompt)
        assert cached_tokens(answer) == 64
        short = complete(client, distinct(2, 1))  # 16 tokens: no full block of 32
        assert cached_tokens(short) == 0
        after = scrape(client)
        assert counter(after, PREFIX_QUERIES) == queries + 70 + 70 + 16
        assert counter(after, PREFIX_HITS) == hits + 64
        assert after.value(KV_USAGE, model_name=MODEL) == 0


def _timed_complete(base_url: str, tokens: list[int]) -> tuple[float, dict[str, Any]]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        answer = complete(client, tokens)
    return time.monotonic(), answer


@pytest.mark.timing
def test_request_waits_for_room_and_a_prompt_larger_than_the_cache_is_refused() -> None:
    args = ["--kv-cache-size", "4", "--block-size", "16", "--time-to-first-token", "1s"]
    args += ["--max-num-seqs", "8"]
    with kv_server(args, sync=False) as (sim, _sub, client):
        a, b, c, d = distinct(1, 2), distinct(2, 2), distinct(3, 2, extra=3), distinct(6, 2)
        with ThreadPoolExecutor(4) as pool, httpx.Client(base_url=sim.url, timeout=30) as other:
            first: list[Future[tuple[float, dict[str, Any]]]] = [
                pool.submit(_timed_complete, sim.url, tokens) for tokens in (a, b)
            ]
            wait_for(client, 2, 0)
            third = pool.submit(_timed_complete, sim.url, c)
            blocked = wait_for(client, 2, 1)  # four blocks held: c's two must wait
            assert blocked.value(KV_USAGE, model_name=MODEL) == 1.0
            body = {"model": MODEL, "prompt": d, "max_tokens": 1}
            streamed = pool.submit(stream, other, COMPLETIONS, body)  # waits too: no 500
            wait_for(client, 2, 2)
            time.sleep(0.3)
            assert not third.done() and not streamed.done()
            assert wait_for(client, 2, 2).value(KV_USAGE, model_name=MODEL) == 1.0
            ends = [f.result(timeout=10)[0] for f in first]
            c_end, c_answer = third.result(timeout=10)
            d_result = streamed.result(timeout=10)
        assert c_answer["choices"][0]["finish_reason"] in ("stop", "length")
        assert cached_tokens(c_answer) == 0
        # c started only when a or b had finished and released its blocks, then paid its TTFT.
        assert c_end - min(ends) >= 0.9
        assert d_result.status == 200 and d_result.done
        assert d_result.chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
        wait_until_idle(client)

        too_big = client.post(COMPLETIONS, json={"prompt": distinct(4, 5), "max_tokens": 1})
        assert too_big.status_code == 400, too_big.text
        error = too_big.json()["error"]
        assert error["code"] == 400 and "cache" in error["message"].lower()
        streamed_too_big = stream(client, COMPLETIONS, {"prompt": distinct(4, 5), "max_tokens": 1})
        assert streamed_too_big.status == 400  # a JSON error, before any event
        assert cached_tokens(complete(client, distinct(5, 4))) == 0  # the whole cache: fits


def _expect_stored(sub: Subscriber, tokens: list[int], parent: int | None = None) -> None:
    hashes = chain(tokens)
    start = 0 if parent is None else hashes.index(parent) + 1
    blocks = tokens[start * BS : len(hashes) * BS]
    assert sub.take_events(1) == [Stored(hashes[start:], parent, blocks, BS, None, "GPU", None)]


def _timed_post(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    response = client.post(path, json={"model": MODEL, **body}, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return time.monotonic() - started, result


@pytest.mark.timing
def test_cache_threshold_header_forces_the_finish_reason() -> None:
    with kv_server(["--time-to-first-token", "600ms"]) as (_sim, sub, client):
        words = "the quick brown fox jumps over the lazy dog " * 6
        chat_body = {"messages": [{"role": "user", "content": words}], "max_tokens": 5}

        elapsed, answer = _timed_post(client, CHAT, chat_body, {HEADER: "true"})
        assert elapsed < 0.45  # refused at once: no TTFT
        # Refused before generating: no content at all, not even an empty one.
        assert answer["choices"] == [
            {
                "index": 0,
                "message": {"role": "assistant"},
                "logprobs": None,
                "finish_reason": THRESHOLD,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
        ]
        n = answer["usage"]["prompt_tokens"]
        assert n >= 2 * BS
        assert answer["usage"] == usage(n, 0)  # nothing cached: null details
        (stored,) = sub.take_events(1)  # refused, yet its blocks were stored
        assert isinstance(stored, Stored) and len(stored.block_hashes) == n // BS

        started = time.monotonic()
        streamed = stream(client, CHAT, {"model": MODEL, **chat_body}, {HEADER: "True"})
        assert time.monotonic() - started < 0.45
        assert streamed.status == 200 and streamed.done
        assert len(streamed.chunks) == 1  # no role chunk: only the finish
        (choice,) = streamed.chunks[0]["choices"]
        assert choice["finish_reason"] == THRESHOLD
        assert "role" not in choice["delta"] and "content" not in choice["delta"]
        with_usage = stream(
            client,
            CHAT,
            {"model": MODEL, **chat_body, "stream_options": {"include_usage": True}},
            {HEADER: "1"},
        )
        assert [c["choices"][0]["finish_reason"] for c in with_usage.chunks[:1]] == [THRESHOLD]
        assert len(with_usage.chunks) == 2 and with_usage.done
        # The usage chunk leaves out details that are null (nothing was cached).
        assert with_usage.chunks[1]["usage"] == stream_usage(n, 0)

        prompt = distinct(1, 2, extra=4)
        body = {"prompt": prompt, "max_tokens": 5}
        elapsed, answer = _timed_post(client, COMPLETIONS, body, {HEADER: "1"})
        assert elapsed < 0.45
        assert answer["choices"][0]["finish_reason"] == THRESHOLD
        assert answer["choices"][0]["text"] == ""
        assert answer["usage"]["completion_tokens"] == 0
        assert answer["usage"]["prompt_tokens_details"] is None
        _expect_stored(sub, prompt)
        streamed = stream(client, COMPLETIONS, {"model": MODEL, **body}, {HEADER: "t"})
        assert streamed.done and len(streamed.chunks) == 1
        assert streamed.chunks[0]["choices"][0]["finish_reason"] == THRESHOLD

        messages_body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
        elapsed, message = _timed_post(client, MESSAGES, messages_body, {HEADER: "TRUE"})
        assert elapsed < 0.45
        assert message["stop_reason"] == "max_tokens"
        assert message["usage"]["output_tokens"] == 0

        for value in ("false", "garbage", "0"):
            elapsed, answer = _timed_post(client, COMPLETIONS, body, {HEADER: value})
            assert elapsed >= 0.55  # generated normally, after the TTFT
            assert answer["choices"][0]["finish_reason"] in ("stop", "length")
            assert cached_tokens(answer) == 32
        sub.quiet()


@pytest.mark.timing
def test_cache_hit_threshold_per_request_and_global() -> None:
    args = ["--global-cache-hit-threshold", "0.6", "--time-to-first-token", "600ms"]
    with kv_server(args) as (_sim, sub, client):

        def run(tokens: list[int], **extra: Any) -> tuple[float, dict[str, Any]]:
            return _timed_post(client, COMPLETIONS, {"prompt": tokens, "max_tokens": 2, **extra})

        def refused(result: tuple[float, dict[str, Any]]) -> None:
            elapsed, answer = result
            assert answer["choices"][0]["finish_reason"] == THRESHOLD, answer
            assert answer["usage"]["prompt_tokens_details"] is None
            assert answer["usage"]["completion_tokens"] == 0
            assert elapsed < 0.45

        def served(result: tuple[float, dict[str, Any]], cached: int) -> None:
            elapsed, answer = result
            assert answer["choices"][0]["finish_reason"] in ("stop", "length"), answer
            assert cached_tokens(answer) == cached
            assert elapsed >= 0.55

        p = distinct(1, 4)
        refused(run(p))  # global 0.6, nothing cached
        _expect_stored(sub, p)  # a refused request still stores its blocks
        served(run(p), 48)  # 48/64 >= 0.6: the last block is computed again, and stored
        _expect_stored(sub, p, parent=chain(p)[2])

        half = p[:32] + distinct(2, 2)
        served(run(half, cache_hit_threshold=0.5), 32)  # 0.5 is not below 0.5
        _expect_stored(sub, half, parent=chain(p)[1])
        other_half = p[:32] + distinct(3, 2)
        refused(run(other_half, cache_hit_threshold=0.51))
        _expect_stored(sub, other_half, parent=chain(p)[1])

        fresh = distinct(4, 2)
        served(run(fresh, cache_hit_threshold=0.0), 0)  # the request's 0 overrides the global
        _expect_stored(sub, fresh)
        for i, out_of_range in enumerate((1.5, -0.1)):
            tokens = distinct(5 + i, 2)
            refused(run(tokens, cache_hit_threshold=out_of_range))  # falls back to the global
            _expect_stored(sub, tokens)

        words = "a fresh conversation about prefix caching and its thresholds " * 3
        chat = {"messages": [{"role": "user", "content": words}], "max_tokens": 2}
        elapsed, answer = _timed_post(client, CHAT, {**chat, "cache_hit_threshold": 0.9})
        assert answer["choices"][0]["finish_reason"] == THRESHOLD and elapsed < 0.45
        assert answer["usage"]["prompt_tokens_details"] is None
        assert len(sub.take_events(1)) == 1
        elapsed, answer = _timed_post(client, CHAT, {**chat, "cache_hit_threshold": 0.0})
        assert answer["choices"][0]["finish_reason"] in ("stop", "length")
        n = answer["usage"]["prompt_tokens"]
        # All of its full blocks were stored; the hit stops short of its last token.
        assert cached_tokens(answer) == (n - 1) // BS * BS
        if n % BS == 0:
            assert len(sub.take_events(1)) == 1  # its last block, computed and stored again

        # The global threshold applies to the Messages API too.
        text = "an anthropic style request that nobody has sent before " * 3
        messages = {"messages": [{"role": "user", "content": text}], "max_tokens": 2}
        elapsed, message = _timed_post(client, MESSAGES, messages)
        assert message["stop_reason"] == "max_tokens" and elapsed < 0.45
        assert message["usage"]["output_tokens"] == 0
        assert len(sub.take_events(1)) == 1
        sub.quiet()


@pytest.mark.timing
def test_all_copies_of_a_request_share_its_cache_threshold_decision() -> None:
    with kv_server(["--time-to-first-token", "600ms"], sync=False) as (_sim, _sub, client):
        body = {"prompt": distinct(1, 2), "max_tokens": 3, "n": 2, "cache_hit_threshold": 0.9}
        elapsed, answer = _timed_post(client, COMPLETIONS, body)
        assert [c["finish_reason"] for c in answer["choices"]] == [THRESHOLD, THRESHOLD]
        assert answer["usage"]["completion_tokens"] == 0
        assert elapsed < 0.45


def test_cached_tokens_of_a_multi_prompt_completion_cover_every_prompt() -> None:
    with kv_server(sync=False) as (_sim, _sub, client):
        a, b = distinct(1, 2), distinct(2, 4)
        assert cached_tokens(complete(client, a)) == cached_tokens(complete(client, b)) == 0
        response = client.post(COMPLETIONS, json={"prompt": [a, b], "max_tokens": 1})
        assert response.status_code == 200, response.text
        usage = response.json()["usage"]
        assert usage["prompt_tokens"] == 96
        # Each prompt computes its last block again: 16 of a's 32, 48 of b's 64.
        assert usage["prompt_tokens_details"]["cached_tokens"] == 64
