"""POST /reset_prefix_cache (dev mode): the prefix cache is emptied with one AllBlocksCleared
event, as vLLM's is, and, as there, not while running requests hold blocks unless
`reset_running_requests` is set: they are then preempted, and recomputed after the reset."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.support.kv import (
    BS,
    V1_HASHES,
    V1_TOKENS,
    Cleared,
    Stored,
    cached_tokens,
    complete,
    distinct,
    kv_server,
)

V1_STORED = Stored(V1_HASHES, None, list(range(1, 33)), BS, None, "GPU", None)


def _reset(client: httpx.Client, **params: str) -> None:
    response = client.post("/reset_prefix_cache", params=params)
    assert response.status_code == 200, response.text
    assert response.content == b""


def test_reset_empties_the_cache_and_publishes_all_blocks_cleared() -> None:
    with kv_server() as (_sim, sub, client):
        assert cached_tokens(complete(client, V1_TOKENS)) == 0
        assert sub.take_events(1) == [V1_STORED]
        assert cached_tokens(complete(client, V1_TOKENS)) == 32
        _reset(client)
        assert sub.take_events(1) == [Cleared()]
        assert sub.contents == set()
        assert cached_tokens(complete(client, V1_TOKENS)) == 0  # a miss: stored again
        assert sub.take_events(1) == [V1_STORED]
        _reset(client, reset_external="true")  # no connector: the same reset
        assert sub.take_events(1) == [Cleared()]
        sub.quiet()


@pytest.mark.timing
def test_running_requests_keep_the_cache_unless_reset_running_requests() -> None:
    slow = ["--latency-calculator", "constant", "--time-to-first-token", "1500ms"]
    with kv_server(slow) as (_sim, sub, client):
        tokens = distinct(7, 2)
        answers: list[dict[str, object]] = []
        running = threading.Thread(target=lambda: answers.append(complete(client, tokens)))
        running.start()
        assert len(sub.take_events(1)) == 1  # its blocks are stored as it starts
        _reset(client)  # refused while it holds them: vLLM answers 200 all the same
        sub.quiet(0.3)
        _reset(client, reset_running_requests="true")
        # Preempted, then recomputed: its prompt's blocks are stored again.
        cleared, stored = sub.take_events(2)
        assert cleared == Cleared() and isinstance(stored, Stored)
        assert stored.token_ids == tokens
        running.join(timeout=10)
        assert answers and not running.is_alive()
        assert cached_tokens(answers[0]) == 0
        preemptions = client.get("/metrics").text
        assert 'vllm:num_preemptions_total{engine="0",model_name=' in preemptions
        sub.quiet()
        bad = client.post("/reset_prefix_cache", params={"reset_running_requests": "sure"})
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] == "reset_running_requests"
