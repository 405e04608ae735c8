"""--time-scale through the real server: latencies armed F times sooner, reported in
simulated time."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.metrics import scrape
from tests.support.server import SimServer

pytestmark = pytest.mark.timing


def test_a_scaled_run_reports_simulated_latencies() -> None:
    args = ["--time-scale", "5", "--time-to-first-token", "500ms", "--inter-token-latency",
            "100ms"]  # fmt: skip
    with SimServer(args) as sim:
        body = {"model": sim.model, "prompt": "hi", "max_tokens": 6, "ignore_eos": True}
        started = time.monotonic()
        response = httpx.post(sim.url + "/v1/completions", json=body, timeout=30)
        elapsed = time.monotonic() - started
        assert response.status_code == 200
        with httpx.Client(base_url=sim.url) as client:
            metrics = scrape(client)
    # 500 + 5 x 100 = 1,000 simulated ms are 200 real ones.
    assert elapsed < 0.6, elapsed
    ttft = metrics.hist("vllm:time_to_first_token_seconds")
    e2e = metrics.hist("vllm:e2e_request_latency_seconds")
    assert ttft.count == 1 and 0.45 <= ttft.sum <= 0.75, ttft.sum
    assert 0.95 <= e2e.sum <= 1.4, e2e.sum
