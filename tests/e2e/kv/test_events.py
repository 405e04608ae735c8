"""KV events end to end: a real simulator publishing to a real ZMQ SUB bound by the test.

The subscriber decodes every batch with plain msgpack (vLLM's schema) and rebuilds the cache
from the events; an independent model of the cache says what the simulator must hold.
"""

from __future__ import annotations

import time

import httpx
import pytest
import zmq

from tests.support.kv import (
    BS,
    COMPLETIONS,
    MODEL,
    POD_IP,
    V1_HASHES,
    V1_TOKENS,
    CacheModel,
    Removed,
    Stored,
    Subscriber,
    cached_tokens,
    cbor,
    chain,
    complete,
    distinct,
    fnv1a64,
    kv_server,
    unpack,
)
from tests.support.server import SimServer, free_port

SENTINEL = [b"", b"\xff" * 8, b""]
NONE3 = (None, "GPU", None)  # lora_id, medium, lora_name of a base-model BlockStored


def seq8(n: int) -> bytes:
    return n.to_bytes(8, "big")


def test_independent_hashes_reproduce_the_router_vectors() -> None:
    """The test's own CBOR + FNV-1a-64 (used as the oracle below) reproduces the llm-d
    router's test vectors."""
    root_payload = cbor([fnv1a64(b""), None, "test-model"])
    assert root_payload.hex() == "831bcbf29ce484222325f66a746573742d6d6f64656c"
    root = fnv1a64(root_payload)
    assert root == 17515353698173365712
    block0 = cbor([root, list(range(1, 17)), None])
    assert block0.hex() == "831bf31309635ef2add0900102030405060708090a0b0c0d0e0f10f6"
    assert chain(V1_TOKENS) == V1_HASHES
    v2 = chain([100, 200, 300, 400, 500, 600, 70000, 80000], "Qwen/Qwen2.5-1.5B-Instruct", "42", 8)
    assert v2 == [8433396862772714866]
    extras: list[object] = [[{"Hash": "img_hash_A"}], [{"Hash": "img_hash_A"}], None]
    assert chain(list(range(1, 25)), block_size=8, extras=extras) == [
        17909592417116385076,
        278782942608244798,
        2493938736211088843,
    ]
    assert chain(list(range(1, 25)), block_size=8) == [
        5577290583401719650,
        8754320283940647457,
        5194289493888567412,
    ]


@pytest.mark.parametrize("map_format", [False, True], ids=["legacy", "map"])
def test_scripted_session_rebuilds_the_cache_exactly(map_format: bool) -> None:
    with kv_server(["--kv-cache-size", "6"], map_format=map_format) as (sim, sub, client):
        assert sub.topic == f"kv@{POD_IP}:{sim.port}@{MODEL}".encode()
        model = CacheModel(6)
        p1 = V1_TOKENS  # 2 full blocks, 8 tokens never hashed
        p2 = list(range(1, 65))  # extends p1 by two blocks
        p3, p4, p5 = distinct(1, 3), distinct(2, 1), distinct(3, 4)
        script = [  # (prompt, cached prefix in blocks)
            (p1, 0),
            (p2, 2),
            (p1, 2),
            (p3, 0),  # full: evicts one of p2's idle tail blocks
            (p4, 0),  # evicts the other
            (p1, 2),  # p1's blocks become the newest idle ones
            (p5, 0),  # evicts exactly p3 and p4, the oldest idle blocks, not p1
            (p5, 3),  # found whole: its last block is computed, and stored, again
            (p2, 2),  # p2's tail is stored again (same hashes), after two evictions
            (p2, 3),
        ]
        for step, (tokens, hit_blocks) in enumerate(script):
            expected_count = model.expected_event_count(tokens)
            answer = complete(client, tokens)
            events = sub.take_events(expected_count)
            assert model.request(tokens, events) == hit_blocks, step
            assert cached_tokens(answer) == hit_blocks * BS, step
            assert answer["usage"]["prompt_tokens"] == len(tokens)
            assert sub.contents == model.contents(), step
            if step == 0:
                assert events == [
                    Stored(V1_HASHES, None, list(range(1, 33)), 16, None, "GPU", None)
                ]
                raw = sub.messages[-1].raw_events[0]
                if map_format:
                    assert list(raw.items()) == [
                        ("type", "BlockStored"),
                        ("block_hashes", V1_HASHES),
                        ("parent_block_hash", None),
                        ("token_ids", list(range(1, 33))),
                        ("block_size", 16),
                        ("medium", "GPU"),
                    ]
                else:
                    assert raw == [
                        "BlockStored",
                        V1_HASHES,
                        0,
                        list(range(1, 33)),
                        16,
                        None,
                        "GPU",
                        None,
                        None,
                    ]
            if step == 1:
                h = chain(p2)
                assert events == [Stored(h[2:], V1_HASHES[1], list(range(33, 65)), 16, *NONE3)]
            if step == 6:
                removed = [e.block_hashes[0] for e in events if isinstance(e, Removed)]
                assert sorted(removed) == sorted(chain(p3) + chain(p4))
                assert isinstance(events[-1], Stored) and len(events) == 5
                raw = sub.messages[-2].raw_events[0]
                if map_format:
                    assert list(raw) == ["type", "block_hashes", "medium"]
                else:
                    assert raw == ["BlockRemoved", [removed[-1]], "GPU"]
        # Batch size 1: one event per message, sequence numbers +1 per batch (Subscriber.recv).
        assert all(len(m.events) == 1 for m in sub.messages)
        assert set(chain(p2)) < sub.contents and len(sub.contents) == 6
        assert len(set(chain(p5)) & sub.contents) == 2
        sub.quiet()


def _make_a_gap(client: httpx.Client, sub: Subscriber, q: list[int], r: list[int]) -> int:
    """Stores q, then r in a cache one block short: r takes the room of one of q's blocks
    (released together, so any of them). Returns the index of q's missing block."""
    model = CacheModel(len(chain(q)))
    for tokens in (q, r):
        count = model.expected_event_count(tokens)
        complete(client, tokens)
        model.request(tokens, sub.take_events(count))
    missing = [i for i, h in enumerate(chain(q)) if h not in sub.contents]
    assert len(missing) == 1 and sub.contents == model.contents()
    return missing[0]


def test_a_hit_is_the_longest_cached_prefix() -> None:
    with kv_server(["--kv-cache-size", "4"]) as (_sim, sub, client):
        q = distinct(10, 4)
        gap = _make_a_gap(client, sub, q, distinct(11, 1))
        # Blocks after the missing one do not count (the reference counted 3 blocks here).
        assert cached_tokens(complete(client, q)) == gap * BS
        # All stored again; found whole, q still computes its last block.
        assert cached_tokens(complete(client, q)) == 3 * BS


def test_blocks_present_after_a_gap_are_kept_and_the_new_run_gets_its_parent() -> None:
    with kv_server(["--kv-cache-size", "3"]) as (_sim, sub, client):
        q, r = distinct(10, 3), distinct(11, 1)
        gap = _make_a_gap(client, sub, q, r)
        answer = complete(client, q)
        # Only r's block may go (q's other blocks are present, so q holds them first); the
        # missing block is a run of its own, its parent the block before it.
        expected = [
            Removed(chain(r), "GPU"),
            Stored(
                [chain(q)[gap]],
                chain(q)[gap - 1] if gap else None,
                q[gap * BS : (gap + 1) * BS],
                BS,
                *NONE3,
            ),
        ]
        events = sub.take_events(2)
        while (more := sub.recv(0.3)) is not None:
            events += more.events
        assert events == expected
        assert cached_tokens(answer) == gap * BS  # the longest cached prefix


def test_n_copies_share_their_blocks() -> None:
    with kv_server(["--max-num-seqs", "8"]) as (_sim, sub, client):
        prompt = distinct(20, 2, extra=5)
        answer = complete(client, prompt, n=3)
        assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
        assert cached_tokens(answer) == 0
        events = sub.take_events(1)
        assert events == [Stored(chain(prompt), None, prompt[:32], BS, *NONE3)]
        again = complete(client, prompt, n=2)
        assert cached_tokens(again) == 32
        chat = client.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "the quick brown fox " * 20}],
                "n": 3,
                "max_tokens": 2,
            },
        )
        assert chat.status_code == 200, chat.text
        assert len(chat.json()["choices"]) == 3
        n_blocks = chat.json()["usage"]["prompt_tokens"] // BS
        assert n_blocks >= 4
        (stored,) = sub.take_events(1)
        assert isinstance(stored, Stored) and len(stored.block_hashes) == n_blocks
        assert stored.parent_block_hash is None
        sub.quiet()


@pytest.mark.timing
def test_batches_hold_event_batch_size_events_or_flush_within_a_second() -> None:
    with kv_server(["--max-num-seqs", "32"], batch=16) as (_sim, sub, client):
        prompts = [distinct(40 + i, 1) for i in range(16)]
        sent = time.monotonic()
        response = client.post(COMPLETIONS, json={"prompt": prompts, "max_tokens": 1})
        assert response.status_code == 200
        message = sub.recv(2.0)
        assert message is not None
        assert message.arrived - sent < 0.8  # a full batch goes at once, not on the timer
        assert len(message.events) == 16
        stored_hashes = sorted(e.block_hashes[0] for e in message.events if isinstance(e, Stored))
        assert stored_hashes == sorted(chain(p)[0] for p in prompts)
        first_seq = message.seq

        prompts = [distinct(60 + i, 1) for i in range(3)]
        sent = time.monotonic()
        response = client.post(COMPLETIONS, json={"prompt": prompts, "max_tokens": 1})
        assert response.status_code == 200
        message = sub.recv(3.0)
        assert message is not None
        assert message.arrived - sent < 1.5  # the partial batch waits at most ~1 s
        assert len(message.events) == 3
        assert message.seq == first_seq + 1  # +1 per batch, not per event
        sub.quiet(1.3)


def _replay(sock: zmq.Socket[bytes], start: int, timeout: float = 3.0) -> list[list[bytes]]:
    """Every reply of a DEALER replay request, up to and including the sentinel."""
    sock.send_multipart([b"", seq8(start)])
    replies: list[list[bytes]] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and sock.poll(int(remaining * 1000)), f"no sentinel: {replies}"
        frames = sock.recv_multipart()
        replies.append(frames)
        if frames[1:] == SENTINEL:
            return replies


@pytest.mark.timing
def test_replay_returns_retained_batches_and_a_stuck_client_stalls_nobody() -> None:
    replay_port = free_port()
    endpoint = f"tcp://127.0.0.1:{replay_port}"
    with kv_server(["--kv-events-replay-endpoint", endpoint]) as (_sim, sub, client):
        # Some batches are big (60 blocks, ~5 kB), so that a client that does not read its
        # replays soon fills every buffer between it and the simulator.
        for tokens in (distinct(30, 1), *(distinct(31 + i, 60) for i in range(3)), distinct(34, 1)):
            complete(client, tokens)
            sub.take_events(1)
        live = sub.messages
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        try:
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(endpoint)

            replies = _replay(dealer, live[1].seq)
            assert replies == [[b"", m.topic, m.frames[1], m.payload] for m in live[1:]] + [
                [b"", *SENTINEL]
            ]

            # From 0: everything retained, seq from 1 up, byte-identical to the live payloads.
            replies = _replay(dealer, 0)
            assert replies[-1] == [b"", *SENTINEL]
            body = replies[:-1]
            assert [int.from_bytes(r[2], "big") for r in body] == list(range(1, live[-1].seq + 1))
            assert all(r[:2] == [b"", sub.topic] and len(r) == 4 for r in body)
            assert body[-len(live) :] == [[b"", m.topic, m.frames[1], m.payload] for m in live]
            for r in body[: -len(live)]:  # the /sleep calls that synchronised the subscriber
                assert unpack(r[3])[1] == [["AllBlocksCleared"]]

            # REQ: one reply per request; beyond the newest seq only the sentinel comes back.
            req = ctx.socket(zmq.REQ)
            req.setsockopt(zmq.LINGER, 0)
            req.connect(endpoint)
            req.send(seq8(live[-1].seq + 5))
            assert req.poll(3000)
            assert req.recv_multipart() == SENTINEL
            req2 = ctx.socket(zmq.REQ)
            req2.setsockopt(zmq.LINGER, 0)
            req2.connect(endpoint)
            req2.send(seq8(live[-1].seq))
            assert req2.poll(3000)
            assert req2.recv_multipart() == [live[-1].topic, live[-1].frames[1], live[-1].payload]

            # Malformed requests get no reply and break nothing.
            dealer.send_multipart([b"", b"\x00\x01"])
            dealer.send_multipart([b"", seq8(1), b"extra frame"])
            assert not dealer.poll(300)

            # A client that never reads: tiny receive queue, a thousand full replays asked.
            stuck = ctx.socket(zmq.DEALER)
            stuck.setsockopt(zmq.LINGER, 0)
            stuck.setsockopt(zmq.RCVHWM, 1)
            stuck.setsockopt(zmq.SNDHWM, 0)
            stuck.connect(endpoint)
            for _ in range(1000):
                stuck.send_multipart([b"", seq8(1)])
            time.sleep(0.3)
            started = time.monotonic()
            again = _replay(dealer, 0, timeout=5.0)
            assert time.monotonic() - started < 3.0
            assert again == replies
            # Live publishing and serving go on too.
            fresh = distinct(35, 1)
            complete(client, fresh)
            assert sub.take_events(1) == [Stored(chain(fresh), None, fresh, BS, *NONE3)]
            latest = _replay(dealer, sub.messages[-1].seq)
            assert latest == [
                [b"", sub.topic, sub.messages[-1].frames[1], sub.messages[-1].payload],
                [b"", *SENTINEL],
            ]
        finally:
            ctx.destroy(linger=0)


def _run_requests(base_url: str, count: int, n_blocks: int) -> float:
    started = time.monotonic()
    with httpx.Client(base_url=base_url, timeout=10) as client:
        for i in range(count):
            prompt = distinct(200 + i, n_blocks)
            answer = complete(client, prompt)
            assert cached_tokens(answer) == 0
    return time.monotonic() - started


@pytest.mark.timing
def test_no_subscriber_does_not_slow_requests() -> None:
    nobody = f"tcp://127.0.0.1:{free_port()}"
    args = ["--enable-kvcache", "--zmq-endpoint", nobody, "--event-batch-size", "1"]
    args += ["--kv-cache-size", "20000"]
    with SimServer(args, env={"POD_IP": POD_IP}, model=MODEL) as sim:
        assert _run_requests(sim.url, 300, 8) < 20.0
        assert httpx.get(sim.url + "/health").status_code == 200


@pytest.mark.timing
def test_subscriber_that_stops_reading_does_not_slow_requests() -> None:
    with kv_server(["--kv-cache-size", "20000"], rcvhwm=1) as (sim, sub, _client):
        # The SUB reads nothing from here on while ~1.5 MB of events are published.
        assert _run_requests(sim.url, 300, 60) < 20.0
        # The publisher survived: reading again, the newest events still arrive.
        frames = None
        while sub.sock.poll(500):
            frames = sub.sock.recv_multipart()
        assert frames is not None
        late = distinct(900, 1)
        with httpx.Client(base_url=sim.url, timeout=10) as client:
            complete(client, late)
        assert sub.sock.poll(3000)
        frames = sub.sock.recv_multipart()
        assert unpack(frames[2])[1][0][1] == chain(late)
