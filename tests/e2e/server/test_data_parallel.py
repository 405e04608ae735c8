"""Data parallelism end to end: `--data-parallel-size 2` serves rank r on port + r with its own
engine and metrics, stops on one SIGTERM, and publishes KV events per rank; a lone
`--data-parallel-rank 1` serves on its port with rank-1 events."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import zmq

from tests.support.metrics import GENERATION_TOTAL, PROMPT_TOTAL, SUCCESS, Metrics, scrape
from tests.support.native import (
    GENERATE,
    MODEL,
    POD_IP,
    Batch,
    bind_subs,
    consecutive_free_ports,
    drain,
    first_batch,
    gen_body,
    port_open,
    prompt,
    recv_batch,
    wait_healthy,
)
from tests.support.server import SimServer
from vllm_sim.engine.tokenizer.simulated import EOS_TOKEN_ID


def dp_server(args: list[str], env: dict[str, str] | None = None) -> SimServer:
    """A two-rank server (started), both ports answering /health."""
    port = consecutive_free_ports(2)
    sim = SimServer(["--data-parallel-size", "2", *args], env=env, port=port).start()
    wait_healthy(port + 1)
    return sim


@pytest.fixture(scope="module")
def ranks() -> Iterator[SimServer]:
    sim = dp_server(["--mode", "echo"])
    try:
        yield sim
    finally:
        assert sim.stop() == 0, sim.stderr()


def test_each_rank_answers_generation_requests(ranks: SimServer) -> None:
    for rank in (0, 1):
        with httpx.Client(base_url=f"http://127.0.0.1:{ranks.port + rank}", timeout=30) as client:
            answer = client.post(GENERATE, json=gen_body([7, rank, 9], 5))
            assert answer.status_code == 200, answer.text
            # The echo, then the end-of-sequence id that ends it.
            assert answer.json()["choices"][0]["token_ids"] == [7, rank, 9, EOS_TOKEN_ID]
            chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            assert client.post("/v1/chat/completions", json=chat).status_code == 200
            models = client.get("/v1/models").json()["data"]
            assert [m["id"] for m in models] == [MODEL]


def test_each_rank_counts_only_its_own_requests(ranks: SimServer) -> None:
    with (
        httpx.Client(base_url=ranks.url, timeout=30) as rank0,
        httpx.Client(base_url=f"http://127.0.0.1:{ranks.port + 1}", timeout=30) as rank1,
    ):
        before0, before1 = scrape(rank0), scrape(rank1)
        for _ in range(2):
            assert rank0.post(GENERATE, json=gen_body([1, 2, 3], 4)).status_code == 200
        for _ in range(3):
            assert rank1.post(GENERATE, json=gen_body([1, 2, 3, 4, 5], 8)).status_code == 200
        after0, after1 = scrape(rank0), scrape(rank1)

    def delta(name: str, before: Metrics, after: Metrics) -> float:
        return after.value(name, model_name=MODEL) - before.value(name, model_name=MODEL)

    # vLLM's `engine` label is the data-parallel rank.
    assert {lbl["engine"] for lbl, _ in after0.series(PROMPT_TOTAL)} == {"0"}
    assert {lbl["engine"] for lbl, _ in after1.series(PROMPT_TOTAL)} == {"1"}
    assert delta(PROMPT_TOTAL, before0, after0) == 2 * 3
    assert delta(PROMPT_TOTAL, before1, after1) == 3 * 5
    # echo: the ids come back, then the end of sequence
    assert delta(GENERATION_TOTAL, before0, after0) == 2 * (3 + 1)
    assert delta(GENERATION_TOTAL, before1, after1) == 3 * (5 + 1)
    done0 = sum(after0.success(MODEL).values()) - sum(before0.success(MODEL).values())
    done1 = sum(after1.success(MODEL).values()) - sum(before1.success(MODEL).values())
    assert (done0, done1) == (2, 3)
    # Same families and labels on both ranks.
    assert {lbl["finished_reason"] for lbl, _ in after0.series(SUCCESS)} == {
        lbl["finished_reason"] for lbl, _ in after1.series(SUCCESS)
    }


@pytest.mark.timing
def test_one_sigterm_drains_and_stops_both_ranks() -> None:
    sim = dp_server(["--time-to-first-token", "500ms"])
    assert sim.process is not None
    result: dict[str, int] = {}

    def in_flight() -> None:
        url = f"http://127.0.0.1:{sim.port + 1}{GENERATE}"
        result["status"] = httpx.post(url, json=gen_body([1, 2], 1), timeout=30).status_code

    thread = threading.Thread(target=in_flight, daemon=True)
    thread.start()
    time.sleep(0.2)  # the request is running on rank 1
    started = time.monotonic()
    sim.process.send_signal(signal.SIGTERM)
    code = sim.process.wait(15)
    elapsed = time.monotonic() - started
    thread.join(10)
    assert code == 0, sim.stderr()
    assert result.get("status") == 200, sim.stderr()  # drained, not cut off
    assert elapsed < 10
    assert not port_open(sim.port) and not port_open(sim.port + 1)


# --- KV events per rank ---------------------------------------------------------------------------


def assert_batch(batch: Batch, rank: int, http_port: int) -> None:
    assert batch.rank == rank, batch
    assert batch.topic == f"kv@{POD_IP}:{http_port}@{MODEL}".encode(), batch.topic
    assert abs(batch.ts - time.time()) < 120
    assert batch.events, batch


def stored_tokens(batches: list[Batch]) -> list[int]:
    tokens: list[int] = []
    for batch in batches:
        for event in batch.events:
            if event[0] == "BlockStored":
                tokens += event[3]
    return tokens


def test_each_rank_publishes_to_its_own_endpoint_with_its_rank() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    zmq_port, (sub0, sub1) = bind_subs(ctx, 2)
    args = [
        "--enable-kvcache",
        "--zmq-endpoint",
        f"tcp://127.0.0.1:{zmq_port}",
        "--event-batch-size",
        "1",
    ]
    sim = dp_server(args, env={"POD_IP": POD_IP})
    try:
        for rank, sub, other in ((0, sub0, sub1), (1, sub1, sub0)):
            http_port = sim.port + rank
            with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as client:
                assert_batch(first_batch(client, sub, tag=10 + rank), rank, http_port)
                drain(other)
                tokens = prompt(900 + rank)
                assert client.post(GENERATE, json=gen_body(tokens, 1)).status_code == 200
                batch = recv_batch(sub, 3.0)
                assert batch is not None, f"rank {rank} published nothing"
                assert_batch(batch, rank, http_port)
                assert stored_tokens([batch, *drain(sub)]) == tokens
                assert recv_batch(other, 0.3) is None, "the other endpoint got a batch"
    finally:
        code = sim.stop()
        for sock in (sub0, sub1):
            sock.close(linger=0)
        ctx.term()
    assert code == 0, sim.stderr()


def test_a_lone_rank_1_serves_on_its_port_and_publishes_as_rank_1() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sub_port, (sub,) = bind_subs(ctx, 1)
    port = consecutive_free_ports(2)
    args = [
        "--data-parallel-rank",
        "1",
        "--enable-kvcache",
        "--zmq-endpoint",
        f"tcp://127.0.0.1:{sub_port - 1}",  # rank 1 adds one
        "--event-batch-size",
        "1",
    ]
    try:
        with (
            SimServer(args, env={"POD_IP": POD_IP}, port=port) as sim,
            httpx.Client(base_url=sim.url, timeout=30) as client,
        ):
            assert not port_open(port + 1), "a lone rank serves on its given port only"
            assert_batch(first_batch(client, sub, tag=20), 1, port)
            tokens = prompt(950)
            assert client.post(GENERATE, json=gen_body(tokens, 1)).status_code == 200
            batch = recv_batch(sub, 3.0)
            assert batch is not None
            assert_batch(batch, 1, port)
            assert stored_tokens([batch, *drain(sub)]) == tokens
    finally:
        sub.close(linger=0)
        ctx.term()


def test_a_rank_that_cannot_bind_stops_all_ranks() -> None:
    """Ranks serve together or not at all: rank 1's port is taken, so nobody serves."""
    port = consecutive_free_ports(2)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", port + 1))
        taken.listen()
        argv = [sys.executable, "-m", "vllm_sim", "--model", "m", "--port", str(port)]
        done = subprocess.run(
            [*argv, "--data-parallel-size", "2"], capture_output=True, timeout=30, check=False
        )
    assert done.returncode != 0, done.stderr
    assert b"address already in use" in done.stderr
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
