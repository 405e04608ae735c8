"""KV accounting is always on, as in vLLM: with no KV flag, `vllm:kv_cache_usage_perc` rises
with the running requests and their output and returns to idle after; a load that
exhausts the blocks preempts (`vllm:num_preemptions_total`) and every request completes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.fixtures import server_fixture
from tests.support.metrics import (
    COMPLETIONS,
    KV_USAGE,
    NUM_PREEMPTIONS,
    NUM_PREEMPTIONS_HIST,
    RUNNING,
    WAITING,
    scrape,
    timed_stream,
    wait_until_idle,
)
from tests.support.server import SimServer

decoding = server_fixture(["--inter-token-latency", "20ms"])
small_cache = server_fixture(
    ["--kv-cache-size", "40", "--block-size", "16", "--inter-token-latency", "5ms"]
)


def _prompt(word: str, words: int = 40) -> str:
    return " ".join(f"{word}{i}" for i in range(words))


def _body(sim: SimServer, word: str, max_tokens: int) -> dict[str, object]:
    return {
        "model": sim.model,
        "prompt": _prompt(word),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.timing
def test_usage_rises_with_requests_and_output_and_returns_to_idle(decoding: SimServer) -> None:
    with httpx.Client(base_url=decoding.url, timeout=30) as client:
        assert wait_until_idle(client).value(KV_USAGE) == 0
        samples: list[tuple[float, float, float]] = []  # (seconds, running, usage)
        stop = threading.Event()

        def sample() -> None:
            start = time.monotonic()
            while not stop.is_set():
                metrics = scrape(client)
                samples.append(
                    (time.monotonic() - start, metrics.value(RUNNING), metrics.value(KV_USAGE))
                )
                time.sleep(0.05)

        with ThreadPoolExecutor(5) as pool:
            watcher = pool.submit(sample)
            first = pool.submit(timed_stream, client, COMPLETIONS, _body(decoding, "a", 150))
            time.sleep(1.5)  # one request alone, its output growing (150 tokens, 3 s)
            others = [
                pool.submit(timed_stream, client, COMPLETIONS, _body(decoding, w, 60))
                for w in ("b", "c", "d")
            ]
            for future in (first, *others):
                assert future.result().status == 200
            stop.set()
            watcher.result()
        idle = wait_until_idle(client)

    alone = [(t, usage) for t, running, usage in samples if running == 1 and t < 1.5]
    crowded = [usage for _, running, usage in samples if running == 4]
    assert len(alone) >= 4 and crowded, samples
    assert alone[0][1] > 0
    assert alone[-1][1] > alone[0][1]  # its output took more blocks
    assert max(crowded) > max(usage for _, usage in alone)  # three more requests, more
    assert idle.value(KV_USAGE) == 0


@pytest.mark.timing
def test_exhausted_blocks_preempt_and_every_request_completes(small_cache: SimServer) -> None:
    """40 blocks of 16 tokens; 8 requests of ~40 prompt tokens and 120 output tokens each
    need up to 10 blocks: twice what the cache holds."""
    with httpx.Client(base_url=small_cache.url, timeout=60) as client:
        before = wait_until_idle(client)
        with ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(
                    lambda w: timed_stream(client, COMPLETIONS, _body(small_cache, w, 120)),
                    [f"w{i}x" for i in range(8)],
                )
            )
        after = wait_until_idle(client)
    for answer in answers:
        assert answer.status == 200 and answer.done
        assert answer.finish_reasons() == {0: "length"}
        assert answer.usage["completion_tokens"] == 120
        assert len(answer.token_times) == 120
    preemptions = after.value(NUM_PREEMPTIONS) - before.value(NUM_PREEMPTIONS)
    assert preemptions > 0
    per_request = after.hist(NUM_PREEMPTIONS_HIST)
    assert per_request.sum - before.hist(NUM_PREEMPTIONS_HIST).sum == preemptions
    assert after.value(KV_USAGE) == 0 and after.value(WAITING) == 0
