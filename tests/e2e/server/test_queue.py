"""Admission, the waiting queue, the gauges and client disconnects, over real HTTP."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.support.async_http import (
    agauges,
    assert_queue_full,
    chat_body,
    completion_body,
    hang_up,
    post,
    raw_post,
    run_with_client,
    wait_for_gauges,
)
from tests.support.errors import assert_openai_error
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

one_slot = server_fixture(
    ["--max-num-seqs", "1", "--max-waiting-queue-length", "1", "--time-to-first-token", "1s"]
)


no_queue = server_fixture(
    ["--max-num-seqs", "1", "--max-waiting-queue-length", "0", "--time-to-first-token", "1s"]
)


three_slots = server_fixture(["--max-num-seqs", "3", "--time-to-first-token", "1s"])


decoding = server_fixture(["--max-num-seqs", "1", "--inter-token-latency", "100ms"])


slow_slot = server_fixture(["--max-num-seqs", "1", "--time-to-first-token", "2s"])


# ----------------------------------------------------------------- queue full


@pytest.mark.timing
@pytest.mark.parametrize("endpoint", ["completions", "chat/completions"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_queue_full_gives_429(one_slot: SimServer, endpoint: str, stream: bool) -> None:
    """1 slot, 1 queue place, TTFT 1 s: of 5 requests, the first runs, the second waits and
    the other three get 429 at once. Each is sent once the gauges show the one before it
    arrived, so a slow machine cannot reorder them on the wire."""
    url = f"{one_slot.openai_url}/{endpoint}"
    make = completion_body if endpoint == "completions" else chat_body
    body = make(one_slot, stream=stream)

    async def body_(client: httpx.AsyncClient) -> None:
        await wait_for_gauges(client, one_slot, running=0, waiting=0)
        gauge_log: list[tuple[int, int]] = []

        async def watch() -> None:
            while True:
                gauge_log.append(await agauges(client, one_slot))
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        first = asyncio.create_task(post(client, url, body))
        await wait_for_gauges(client, one_slot, running=1, waiting=0)
        second = asyncio.create_task(post(client, url, body))
        await wait_for_gauges(client, one_slot, running=1, waiting=1)
        refused = [await post(client, url, body) for _ in range(3)]
        outcomes = [await first, await second, *refused]
        watcher.cancel()
        assert [o.status for o in outcomes] == [200, 200, 429, 429, 429]
        for ok in outcomes[:2]:
            if stream:
                assert ok.done and ok.token_times
            else:
                assert ok.json()["choices"][0]["finish_reason"] in ("stop", "length")
        assert outcomes[1].elapsed >= 1.5  # waited for the first one's slot
        for answer in refused:
            assert_queue_full(answer)
            assert answer.elapsed < 0.5  # refused at once, not after queueing
        assert max(r for r, _ in gauge_log) == 1
        assert max(w for _, w in gauge_log) == 1

    run_with_client(body_, idle=one_slot)


@pytest.mark.timing
def test_zero_queue_length_refuses_at_once_when_busy(no_queue: SimServer) -> None:
    async def body(client: httpx.AsyncClient) -> None:
        url = no_queue.openai_url + "/completions"
        first = asyncio.create_task(post(client, url, completion_body(no_queue)))
        await wait_for_gauges(client, no_queue, running=1)
        refused = await post(client, url, completion_body(no_queue))
        assert_queue_full(refused)
        assert refused.elapsed < 0.5
        streamed = await post(client, url, completion_body(no_queue, stream=True))
        assert_queue_full(streamed)
        assert (await first).status == 200
        # The slot is free again: accepted.
        again = await post(client, url, completion_body(no_queue))
        assert again.status == 200

    run_with_client(body)


# ----------------------------------------------------------------- gauges


def test_gauges_track_running_and_waiting(three_slots: SimServer) -> None:
    async def body(client: httpx.AsyncClient) -> None:
        assert await agauges(client, three_slots) == (0, 0)
        url = three_slots.openai_url + "/completions"
        tasks = [
            asyncio.create_task(post(client, url, completion_body(three_slots))) for _ in range(5)
        ]
        await wait_for_gauges(client, three_slots, running=3, waiting=2)
        log: list[tuple[int, int]] = [(3, 2)]
        while not all(t.done() for t in tasks):
            log.append(await agauges(client, three_slots))
            await asyncio.sleep(0.03)
        outcomes = [t.result() for t in tasks]
        assert [o.status for o in outcomes] == [200] * 5
        assert max(r for r, _ in log) == 3  # never more than max-num-seqs
        assert (2, 0) in log  # the queued pair moved into freed slots
        waits = [w for _, w in log]
        assert waits == sorted(waits, reverse=True)

    run_with_client(body, idle=three_slots)


@pytest.mark.timing
def test_n_choices_each_take_a_slot(three_slots: SimServer) -> None:
    async def body(client: httpx.AsyncClient) -> None:
        url = three_slots.openai_url + "/chat/completions"
        start = time.monotonic()
        task = asyncio.create_task(post(client, url, chat_body(three_slots, n=3)))
        await wait_for_gauges(client, three_slots, running=3, waiting=0)
        outcome = await task
        elapsed = time.monotonic() - start
        assert outcome.status == 200
        choices = outcome.json()["choices"]
        assert sorted(c["index"] for c in choices) == [0, 1, 2]
        assert all(c["message"]["content"] for c in choices)
        assert elapsed < 1.9  # the three ran side by side, not one after another

    run_with_client(body, idle=three_slots)


@pytest.mark.timing
def test_n_choices_queue_behind_busy_slots(three_slots: SimServer) -> None:
    async def body(client: httpx.AsyncClient) -> None:
        url = three_slots.openai_url + "/chat/completions"
        first = asyncio.create_task(post(client, url, chat_body(three_slots, n=2)))
        await wait_for_gauges(client, three_slots, running=2)
        second = asyncio.create_task(post(client, url, chat_body(three_slots, n=3)))
        await wait_for_gauges(client, three_slots, running=3, waiting=2)
        a, b = await asyncio.gather(first, second)
        assert a.status == b.status == 200
        assert len(b.json()["choices"]) == 3
        assert b.elapsed >= 1.5  # two of its choices waited for a slot

    run_with_client(body, idle=three_slots)


# ----------------------------------------------------------------- client disconnect


@pytest.mark.timing
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_client_disconnect_aborts_and_frees_the_slot(slow_slot: SimServer, stream: bool) -> None:
    """1 slot, TTFT 2 s: a client that hangs up frees its slot at once."""
    path = "/v1/completions"
    body = completion_body(slow_slot, stream=stream)

    async def body_(client: httpx.AsyncClient) -> None:
        await wait_for_gauges(client, slow_slot, running=0, waiting=0)
        # Alone: hanging up drops the running gauge to 0 at once.
        _, writer = await raw_post(slow_slot, path, body)
        await wait_for_gauges(client, slow_slot, running=1)
        await hang_up(writer)
        assert await wait_for_gauges(client, slow_slot, running=0, timeout=2) < 0.5

        # With a request queued behind: it starts as soon as the first one leaves.
        _, writer = await raw_post(slow_slot, path, body)
        await wait_for_gauges(client, slow_slot, running=1)
        url = slow_slot.url + path
        start = time.monotonic()
        follower = asyncio.create_task(post(client, url, completion_body(slow_slot)))
        await wait_for_gauges(client, slow_slot, running=1, waiting=1)
        # A waiting client that hangs up gives its queue place back at once.
        _, waiter = await raw_post(slow_slot, path, body)
        await wait_for_gauges(client, slow_slot, running=1, waiting=2)
        await hang_up(waiter)
        assert await wait_for_gauges(client, slow_slot, waiting=1, timeout=2) < 0.5
        await asyncio.sleep(0.1)
        await hang_up(writer)
        assert await wait_for_gauges(client, slow_slot, waiting=0, timeout=2) < 0.5
        outcome = await follower
        elapsed = time.monotonic() - start
        assert outcome.status == 200
        # Served after ~0.3 s + its own 2 s, not after the first one's 2 s as well.
        assert elapsed < 3.3

    run_with_client(body_, idle=slow_slot)


@pytest.mark.timing
def test_disconnect_mid_stream_frees_the_slot(decoding: SimServer) -> None:
    """A stream of 50 tokens, 100 ms apart: hanging up after a few frees the slot."""
    body = completion_body(decoding, stream=True, max_tokens=50, ignore_eos=True)

    async def body_(client: httpx.AsyncClient) -> None:
        reader, writer = await raw_post(decoding, "/v1/completions", body)
        received = b""
        while received.count(b'"text":') < 3:
            chunk = await asyncio.wait_for(reader.read(4096), 3)
            assert chunk, "server closed the stream"
            received += chunk
        assert received.startswith(b"HTTP/1.1 200")
        assert await agauges(client, decoding) == (1, 0)
        await hang_up(writer)
        assert await wait_for_gauges(client, decoding, running=0, timeout=2) < 0.5
        # The slot serves the next request at once.
        start = time.monotonic()
        outcome = await post(
            client, decoding.openai_url + "/completions", completion_body(decoding)
        )
        assert outcome.status == 200
        assert time.monotonic() - start < 1.0

    run_with_client(body_)


def test_request_needing_more_places_than_free_is_refused_whole(one_slot: SimServer) -> None:
    """1 slot + 1 queue place: n=3 can never fit, so none of its choices is started, and the
    answer is a 400 naming n rather than a 429 that invites a retry."""

    async def body(client: httpx.AsyncClient) -> None:
        await wait_for_gauges(client, one_slot, running=0, waiting=0)
        url = one_slot.openai_url + "/chat/completions"
        refused = await post(client, url, chat_body(one_slot, n=3))
        assert_openai_error(refused, 400, param="n")
        url = one_slot.openai_url + "/completions"
        refused = await post(client, url, completion_body(one_slot, prompt=["a", "b", "c"]))
        assert_openai_error(refused, 400, param="n")

    run_with_client(body, idle=one_slot)


@pytest.mark.timing
def test_prompts_times_n_sequences_are_scheduled(three_slots: SimServer) -> None:
    """Completions with 2 prompts and n=2 is 4 sequences: 3 run, 1 waits."""

    async def body(client: httpx.AsyncClient) -> None:
        url = three_slots.openai_url + "/completions"
        request = completion_body(three_slots, prompt=["Hello there", "Bye now"], n=2)
        task = asyncio.create_task(post(client, url, request))
        await wait_for_gauges(client, three_slots, running=3, waiting=1)
        outcome = await task
        assert outcome.status == 200
        assert sorted(c["index"] for c in outcome.json()["choices"]) == [0, 1, 2, 3]
        assert outcome.elapsed >= 1.5  # the fourth waited for a slot

    run_with_client(body, idle=three_slots)
