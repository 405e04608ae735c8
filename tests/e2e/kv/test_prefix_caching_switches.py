"""The two switches: prefix caching (vLLM's, on by default) decides whether prompts find
cached blocks; `--enable-kvcache` (the reference's) adds only KV events and cache-hit
thresholds. Without it a threshold is ignored, and the header still forces its answer."""

from __future__ import annotations

import httpx

from tests.support.kv import COMPLETIONS, MODEL, cached_tokens, complete, distinct
from tests.support.metrics import CACHE_CONFIG, scrape
from tests.support.server import SimServer

DETAILS = ["--enable-prompt-tokens-details"]


def test_prefix_caching_is_on_without_any_kv_flag() -> None:
    with SimServer(DETAILS) as sim, httpx.Client(base_url=sim.url, timeout=10) as client:
        prompt = distinct(1, 4)
        assert cached_tokens(complete(client, prompt)) == 0
        assert cached_tokens(complete(client, prompt)) == 48  # its last block computes again
        [(labels, _)] = scrape(client).series(CACHE_CONFIG)
        assert labels["enable_prefix_caching"] == "True"


def test_no_prefix_caching_reports_no_cached_tokens() -> None:
    args = [*DETAILS, "--no-enable-prefix-caching"]
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=10) as client:
        prompt = distinct(2, 4)
        assert [cached_tokens(complete(client, prompt)) for _ in range(3)] == [0, 0, 0]
        [(labels, _)] = scrape(client).series(CACHE_CONFIG)
        assert labels["enable_prefix_caching"] == "False"


def test_thresholds_need_enable_kvcache_but_the_header_does_not() -> None:
    with SimServer(DETAILS) as sim, httpx.Client(base_url=sim.url, timeout=10) as client:
        cold = complete(client, distinct(3, 4), cache_hit_threshold=0.9)
        assert cold["choices"][0]["finish_reason"] == "length"  # ignored: no --enable-kvcache
        body = {"model": MODEL, "prompt": distinct(4, 4), "max_tokens": 1}
        forced = client.post(
            COMPLETIONS, json=body, headers={"X-Cache-Threshold-Finish-Reason": "true"}
        )
        assert forced.status_code == 200
        assert forced.json()["choices"][0]["finish_reason"] == "cache_threshold"
