"""Under a queueing load (more concurrent requests than running slots), the TTFT quantiles
Prometheus computes from /metrics agree with what the clients measured, and every finished
request has its queue time recorded (0 included), as in vLLM."""

from __future__ import annotations

import threading
from statistics import quantiles

import httpx
import pytest

from tests.support.fixtures import server_fixture
from tests.support.metrics import (
    CHAT,
    QUEUE,
    TTFT,
    Histogram,
    chat,
    timed_stream,
    wait_until_idle,
)
from tests.support.server import SimServer

CLIENTS = 8
ROUNDS = 3
queueing = server_fixture(
    ["--max-num-seqs", "2", "--time-to-first-token", "100ms", "--inter-token-latency", "10ms"]
)


def histogram_quantile(q: float, histogram: Histogram, before: Histogram) -> float:
    """Prometheus' histogram_quantile over the increase between two scrapes: the bucket
    that holds the q-th observation, interpolated linearly inside it."""
    bounds = sorted(histogram.buckets)
    counts = [histogram.buckets[b] - before.buckets[b] for b in bounds]
    rank = q * counts[-1]
    lower = previous = 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - previous) / (count - previous)
        lower, previous = bound, count
    return lower


def bucket_width(value: float, histogram: Histogram) -> float:
    """The width of the bucket `value` falls in: the resolution a quantile has there."""
    lower = 0.0
    for bound in sorted(histogram.buckets):
        if value <= bound:
            return bound - lower
        lower = bound
    return float("inf")


@pytest.mark.timing
def test_ttft_quantiles_agree_with_the_clients(queueing: SimServer) -> None:
    ttfts: list[float] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        with httpx.Client(base_url=queueing.url, timeout=30) as own:
            for r in range(ROUNDS):
                body = chat(f"queue {i} {r}", max_tokens=3, stream=True)
                timed = timed_stream(own, CHAT, body)
                assert timed.status == 200 and timed.done
                with lock:
                    ttfts.append(timed.token_times[0])

    with httpx.Client(base_url=queueing.url, timeout=30) as scraper:
        before = wait_until_idle(scraper)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        after = wait_until_idle(scraper)
    finished = CLIENTS * ROUNDS
    assert len(ttfts) == finished
    assert max(ttfts) > 0.25  # the load did queue: some waited for a slot
    ttft, ttft_before = after.hist(TTFT), before.hist(TTFT)
    assert ttft.count - ttft_before.count == finished
    assert after.hist(QUEUE).count - before.hist(QUEUE).count == finished
    cuts = quantiles(ttfts, n=100, method="inclusive")
    for q, measured in ((0.5, cuts[49]), (0.99, cuts[98])):
        reported = histogram_quantile(q, ttft, ttft_before)
        resolution = bucket_width(measured, ttft)
        assert abs(reported - measured) <= resolution, (q, reported, measured, sorted(ttfts))
