"""P/D disaggregation (kv_transfer_params) and sleep mode, on a real simulator."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.support.kv import (
    BS,
    CHAT,
    COMPLETIONS,
    MODEL,
    POD_IP,
    V1_HASHES,
    V1_TOKENS,
    Cleared,
    Stored,
    cached_tokens,
    complete,
    distinct,
    kv_server,
    stream,
)
from tests.support.native import TRANSFER_KEYS
from tests.support.server import SimServer


def _timed(client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    response = client.post(path, json={"model": MODEL, **body})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return time.monotonic() - started, answer


def _check_prefill_answer(answer: dict[str, Any]) -> str:
    assert answer["choices"][0]["finish_reason"] == "remote_decode"
    params = answer["kv_transfer_params"]
    assert sorted(params) == sorted(TRANSFER_KEYS)
    assert params["do_remote_decode"] is False
    assert params["do_remote_prefill"] is True
    engine_id = params["remote_engine_id"]
    assert isinstance(engine_id, str) and engine_id
    ids = params["remote_block_ids"]
    assert isinstance(ids, list) and ids and all(type(i) is int for i in ids)
    assert params["remote_host"] == POD_IP
    assert params["remote_port"] == 5600
    assert params["tp_size"] == 1
    return engine_id


@pytest.mark.timing
def test_prefill_and_decode_sides_of_pd() -> None:
    args = ["--latency-calculator", "constant", "--time-to-first-token", "50ms"]
    args += ["--kv-cache-transfer-latency", "600ms"]
    with kv_server(args, sync=False) as (_sim, _sub, client):
        # Decode side: the KV transfer latency replaces the TTFT, full blocks count as cached.
        elapsed, answer = _timed(client, COMPLETIONS, {"prompt": distinct(1, 2), "max_tokens": 1})
        assert elapsed < 0.45 and cached_tokens(answer) == 0
        decode = {"do_remote_prefill": True}
        body = {"prompt": distinct(2, 2, extra=8), "max_tokens": 1, "kv_transfer_params": decode}
        elapsed, answer = _timed(client, COMPLETIONS, body)
        assert elapsed >= 0.59, elapsed
        assert cached_tokens(answer) == 32  # 40 tokens: two full blocks transferred
        assert answer["choices"][0]["finish_reason"] in ("stop", "length")
        assert answer["kv_transfer_params"] is None  # vLLM's key, null off the prefill side
        chat = {
            "messages": [{"role": "user", "content": "decode this please " * 8}],
            "max_tokens": 1,
            "kv_transfer_params": decode,
        }
        elapsed, answer = _timed(client, CHAT, chat)
        assert elapsed >= 0.59
        n = answer["usage"]["prompt_tokens"]
        assert n >= BS and cached_tokens(answer) == n // BS * BS

        # Prefill side: vLLM's NIXL parameters for the decode node, not streamed.
        prefill = {"do_remote_decode": True}
        body = {"prompt": distinct(3, 2, extra=8), "max_tokens": 1, "kv_transfer_params": prefill}
        elapsed, answer = _timed(client, COMPLETIONS, body)
        assert elapsed < 0.45  # an ordinary prefill: the TTFT, not the transfer latency
        engine_id = _check_prefill_answer(answer)
        chat = {
            "messages": [{"role": "user", "content": "prefill this"}],
            "max_tokens": 1,
            "kv_transfer_params": prefill,
        }
        _, answer = _timed(client, CHAT, chat)
        assert _check_prefill_answer(answer) == engine_id  # one engine, one id

        for path, streamed in ((COMPLETIONS, body), (CHAT, chat)):
            result = stream(client, path, {"model": MODEL, **streamed})
            assert result.status == 400, result.body
            error = httpx.Response(400, content=result.body).json()["error"]
            assert error["message"] == "Prefill does not support streaming"
            assert error["code"] == 400


def test_sleep_endpoints_exist_only_in_dev_mode() -> None:
    args = ["--enable-kvcache", "--enable-sleep-mode"]
    env = {"POD_IP": POD_IP, "VLLM_SERVER_DEV_MODE": "0"}
    with SimServer(args, env=env, model=MODEL) as sim, httpx.Client(base_url=sim.url) as client:
        assert client.post("/sleep").status_code == 404
        assert client.post("/wake_up").status_code == 404
        assert client.get("/is_sleeping").status_code == 404
        assert complete(client, distinct(1, 1))["choices"][0]["finish_reason"] in ("stop", "length")


def test_sleep_needs_enable_sleep_mode() -> None:
    env = {"POD_IP": POD_IP, "VLLM_SERVER_DEV_MODE": "1"}
    with (
        SimServer(
            ["--enable-kvcache", "--enable-prompt-tokens-details"], env=env, model=MODEL
        ) as sim,
        httpx.Client(base_url=sim.url) as client,
    ):
        response = client.post("/sleep")
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == 400
        assert client.get("/is_sleeping").json() == {"is_sleeping": False}
        prompt = distinct(1, 2)
        assert cached_tokens(complete(client, prompt)) == 0
        # The cache was not touched: a hit, all but the last block (its last token computes).
        assert cached_tokens(complete(client, prompt)) == 16


def _asleep(client: httpx.Client) -> bool:
    response = client.get("/is_sleeping")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"is_sleeping"} and isinstance(body["is_sleeping"], bool)
    state: bool = body["is_sleeping"]
    return state


def _refused_while_asleep(client: httpx.Client) -> None:
    for path, body in (
        (COMPLETIONS, {"prompt": V1_TOKENS, "max_tokens": 1}),
        (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
    ):
        response = client.post(path, json=body)
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert "/wake_up" in error["message"] and error["code"] == 503


def test_sleep_clears_the_cache_and_wake_up_tags() -> None:
    with kv_server() as (_sim, sub, client):
        v1_stored = Stored(V1_HASHES, None, list(range(1, 33)), BS, None, "GPU", None)
        assert not _asleep(client)
        assert cached_tokens(complete(client, V1_TOKENS)) == 0
        assert sub.take_events(1) == [v1_stored]
        assert cached_tokens(complete(client, V1_TOKENS)) == 32

        for level in (1, 2):  # one AllBlocksCleared per call, even when already asleep
            answer = client.post("/sleep", params={"level": level})
            assert answer.status_code == 200
            assert answer.json() == {"status": "sleeping", "level": level}  # vLLM 0.32's
            assert sub.take_events(1) == [Cleared()]
            assert sub.contents == set()
        assert _asleep(client)
        _refused_while_asleep(client)

        woke = client.post("/wake_up", params={"tags": "weights"})
        assert woke.json() == {"status": "sleeping", "tags": ["weights"]}
        assert _asleep(client)  # the KV cache still sleeps
        _refused_while_asleep(client)
        woke = client.post("/wake_up", params={"tags": "kv_cache"})
        assert woke.json() == {"status": "awake", "tags": ["kv_cache"]}
        assert not _asleep(client)

        # The cache was emptied: a miss, and the blocks are stored (and evented) again.
        assert cached_tokens(complete(client, V1_TOKENS)) == 0
        assert sub.take_events(1) == [v1_stored]
        assert sub.contents == set(V1_HASHES)
        assert cached_tokens(complete(client, V1_TOKENS)) == 32

        assert client.post("/sleep").status_code == 200
        assert sub.take_events(1) == [Cleared()]
        woke = client.post("/wake_up")  # no tags: everything wakes
        assert woke.status_code == 200 and woke.json() == {"status": "awake", "tags": None}
        assert not _asleep(client)
        refused = client.post("/sleep", params={"level": 3})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "level"
        assert not _asleep(client)
        assert cached_tokens(complete(client, V1_TOKENS)) == 0
        assert sub.take_events(1) == [v1_stored]
        assert all(len(m.events) == 1 for m in sub.messages)
        sub.quiet()
