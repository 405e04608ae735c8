"""KV events: wire encoding, topic and endpoints, live PUB batches and ROUTER replay.

Sockets are real, on loopback. The test SUB socket binds (as consumers do) and the publisher
connects. Payloads are decoded with the plain `msgpack` package, independently of the
encoder, against the layout of vLLM's `EventBatch` / tagged `KVCacheEvent` structs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgpack  # type: ignore[import-untyped, unused-ignore]
import pytest
import zmq
import zmq.asyncio

from vllm_sim.engine.kvcache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    KvEventPublisher,
    encode_batch,
    offset_endpoint,
    topic_for,
)

TOPIC = "kv@10.0.0.1:8000@Qwen/Qwen2.5-1.5B-Instruct"
SENTINEL = [b"", b"\xff" * 8, b""]
BIG = 9540012594951042066  # > 2**63: needs uint64
BIG2 = 16921089685996993662


def unpack(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


def seq8(n: int) -> bytes:
    return n.to_bytes(8, "big")


def stored(i: int, lora: bool = False) -> BlockStored:
    return BlockStored(
        block_hashes=(BIG + i, BIG2),
        parent_block_hash=None if i % 2 else 7 + i,
        token_ids=tuple(range(32)),
        block_size=16,
        lora_id=2 if lora else None,
        lora_name="sql-lora" if lora else None,
    )


# -- encoding -----------------------------------------------------------------------------


def test_legacy_batch_layout() -> None:
    events: list[KvEvent] = [
        BlockStored((BIG, BIG2), None, tuple(range(1, 33)), 16),
        BlockStored((5,), BIG, tuple(range(16)), 16, lora_id=1, lora_name="lora-a"),
        BlockRemoved((BIG2,)),
        AllBlocksCleared(),
    ]
    payload = encode_batch(1716200000.123, events, 3, map_format=False)
    assert payload[0] == 0x93  # fixarray of 3
    assert payload[1] == 0xCB  # ts as float64
    assert bytes([0xCF]) + BIG.to_bytes(8, "big") in payload  # hash as uint64
    ts, evs, rank = unpack(payload)
    assert ts == 1716200000.123
    assert rank == 3
    assert evs == [
        ["BlockStored", [BIG, BIG2], 0, list(range(1, 33)), 16, None, "GPU", None, None],
        ["BlockStored", [5], BIG, list(range(16)), 16, 1, "GPU", "lora-a", None],
        ["BlockRemoved", [BIG2], "GPU"],
        ["AllBlocksCleared"],
    ]


def test_map_batch_layout() -> None:
    events: list[KvEvent] = [
        BlockStored((BIG, BIG2), None, tuple(range(1, 33)), 16),
        BlockStored((5,), BIG, tuple(range(16)), 32, lora_id=2, lora_name="lora-b"),
        BlockRemoved((BIG2,)),
        AllBlocksCleared(),
    ]
    ts, evs, rank = unpack(encode_batch(1.5, events, 0, map_format=True))
    assert (ts, rank) == (1.5, 0)
    assert [list(e.items()) for e in evs] == [
        [
            ("type", "BlockStored"),
            ("block_hashes", [BIG, BIG2]),
            ("parent_block_hash", None),
            ("token_ids", list(range(1, 33))),
            ("block_size", 16),
            ("medium", "GPU"),
        ],
        [
            ("type", "BlockStored"),
            ("block_hashes", [5]),
            ("parent_block_hash", BIG),
            ("token_ids", list(range(16))),
            ("block_size", 32),
            ("lora_id", 2),
            ("medium", "GPU"),
            ("lora_name", "lora-b"),
        ],
        [("type", "BlockRemoved"), ("block_hashes", [BIG2]), ("medium", "GPU")],
        [("type", "AllBlocksCleared")],
    ]


def test_empty_batch_and_bad_values() -> None:
    assert unpack(encode_batch(2.0, [], 1, map_format=False)) == [2.0, [], 1]
    with pytest.raises(OverflowError):
        encode_batch(0.0, [BlockRemoved((2**64,))], 0, map_format=False)
    with pytest.raises(TypeError):
        encode_batch(0.0, ["BlockRemoved"], 0, map_format=False)  # type: ignore[list-item]


def test_topic_and_endpoint_offsets() -> None:
    assert topic_for("10.0.0.1", 8000, "Qwen/Qwen2.5-1.5B-Instruct") == TOPIC
    assert offset_endpoint("tcp://127.0.0.1:5557", 0) == "tcp://127.0.0.1:5557"
    assert offset_endpoint("tcp://127.0.0.1:5557", 3) == "tcp://127.0.0.1:5560"
    assert offset_endpoint("tcp://*:5557", 1) == "tcp://*:5558"
    assert offset_endpoint("tcp://[::1]:5557", 2) == "tcp://[::1]:5559"
    assert offset_endpoint("ipc:///tmp/kv-events", 2) == "ipc:///tmp/kv-events"
    assert offset_endpoint("tcp://host:port", 2) == "tcp://host:port"
    assert offset_endpoint("tcp://host:", 2) == "tcp://host:"
    assert offset_endpoint("", 2) == ""


def test_constructor_validation() -> None:
    for kwargs in (
        {"batch_size": 0},
        {"replay_queue_size": 0},
        {"flush_interval": 0.0},
        {"max_pending": 0},
    ):
        args: dict[str, Any] = {
            "endpoint": "tcp://127.0.0.1:1",
            "topic": TOPIC,
            "batch_size": 4,
            "map_format": False,
            "dp_rank": 0,
        }
        args.update(kwargs)
        with pytest.raises(ValueError):
            KvEventPublisher(**args)


# -- live publishing ----------------------------------------------------------------------


@asynccontextmanager
async def zmq_context() -> AsyncIterator[zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    try:
        yield ctx
    finally:
        ctx.destroy(linger=0)


async def bound_sub(ctx: zmq.asyncio.Context, rcvhwm: int = 1000) -> tuple[zmq.asyncio.Socket, str]:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, rcvhwm)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind("tcp://127.0.0.1:*")
    return sub, sub.getsockopt_string(zmq.LAST_ENDPOINT)


@asynccontextmanager
async def connected(
    ctx: zmq.asyncio.Context, rcvhwm: int = 1000, **kwargs: Any
) -> AsyncIterator[tuple[zmq.asyncio.Socket, KvEventPublisher]]:
    """A bound SUB and a started publisher connected to it (subscription propagated)."""
    sub, endpoint = await bound_sub(ctx, rcvhwm)
    args: dict[str, Any] = {"topic": TOPIC, "batch_size": 4, "map_format": False, "dp_rank": 0}
    args.update(kwargs)
    publisher = KvEventPublisher(endpoint, **args)
    await publisher.start()
    try:
        # libzmq (LIBZMQ-559): a *bound* SUB sends its subscriptions to a newly connected PUB
        # only when it processes commands (any poll/recv/EVENTS call); real consumers do that
        # in their receive loop. Connecting on loopback takes milliseconds.
        for _ in range(15):
            sub.getsockopt(zmq.EVENTS)
            await asyncio.sleep(0.02)
        yield sub, publisher
    finally:
        await publisher.close()
        sub.close(linger=0)


async def recv(sock: zmq.asyncio.Socket, timeout: float = 3.0) -> list[bytes]:
    return await asyncio.wait_for(sock.recv_multipart(), timeout)


async def nothing_arrives(sock: zmq.asyncio.Socket, wait: float) -> bool:
    try:
        await asyncio.wait_for(sock.recv_multipart(), wait)
    except TimeoutError:
        return True
    return False


@pytest.mark.parametrize("map_format", [False, True])
def test_live_batches_frames_seq_and_payload(map_format: bool) -> None:
    async def main() -> None:
        async with (
            zmq_context() as ctx,
            connected(ctx, batch_size=2, map_format=map_format, dp_rank=5) as (sub, pub),
        ):
            assert pub.sequence == 0
            events: list[KvEvent] = [stored(0), stored(1, lora=True), BlockRemoved((BIG,))]
            events += [AllBlocksCleared(), stored(2), BlockRemoved((3,))]
            for event in events:
                pub.publish(event)
            messages = [await recv(sub) for _ in range(3)]
            assert pub.sequence == 3
            for n, message in enumerate(messages, 1):
                assert len(message) == 3
                topic, seq, payload = message
                assert topic == TOPIC.encode()
                assert seq == seq8(n)
                ts, evs, rank = unpack(payload)
                assert isinstance(ts, float)
                assert abs(ts - time.time()) < 60
                assert rank == 5
                assert evs == [
                    unpack(encode_batch(0.0, [e], 0, map_format))[1][0]
                    for e in events[2 * n - 2 : 2 * n]
                ]
            first = unpack(messages[0][2])[1]
            if map_format:
                assert first[0] == {
                    "type": "BlockStored",
                    "block_hashes": [BIG, BIG2],
                    "parent_block_hash": 7,
                    "token_ids": list(range(32)),
                    "block_size": 16,
                    "medium": "GPU",
                }
                assert list(first[1]) == [
                    "type",
                    "block_hashes",
                    "parent_block_hash",
                    "token_ids",
                    "block_size",
                    "lora_id",
                    "medium",
                    "lora_name",
                ]
                assert first[1]["parent_block_hash"] is None
            else:
                assert first == [
                    ["BlockStored", [BIG, BIG2], 7, list(range(32)), 16, None, "GPU", None, None],
                    [
                        *["BlockStored", [BIG + 1, BIG2], 0, list(range(32)), 16],
                        *[2, "GPU", "sql-lora", None],
                    ],
                ]

    asyncio.run(main())


@pytest.mark.timing
def test_full_batch_is_sent_immediately_partial_waits_for_timer() -> None:
    async def main() -> None:
        async with (
            zmq_context() as ctx,
            connected(ctx, batch_size=3, flush_interval=30.0) as (
                sub,
                pub,
            ),
        ):
            pub.publish(stored(0))
            pub.publish(stored(1))
            assert await nothing_arrives(sub, 0.3)  # below batch size, timer far away
            start = time.monotonic()
            pub.publish(stored(2))
            _, seq, payload = await recv(sub, 1.0)
            assert time.monotonic() - start < 0.5
            assert seq == seq8(1)
            assert len(unpack(payload)[1]) == 3

    asyncio.run(main())


@pytest.mark.timing
def test_partial_batch_flushed_by_timer() -> None:
    async def main() -> None:
        async with zmq_context() as ctx, connected(ctx, batch_size=16) as (sub, pub):
            start = time.monotonic()
            pub.publish(stored(0))
            pub.publish(BlockRemoved((1,)))
            _, seq, payload = await recv(sub, 2.0)
            assert time.monotonic() - start < 1.2
            assert seq == seq8(1)
            assert [e[0] for e in unpack(payload)[1]] == ["BlockStored", "BlockRemoved"]
            # nothing pending: the timer sends nothing
            assert await nothing_arrives(sub, 1.2)
            assert pub.sequence == 1

    asyncio.run(main())


@pytest.mark.timing
def test_events_published_before_start_are_sent_by_first_flush() -> None:
    async def main() -> None:
        async with zmq_context() as ctx:
            sub, endpoint = await bound_sub(ctx)
            pub = KvEventPublisher(endpoint, TOPIC, 2, False, 0, flush_interval=0.3)
            for i in range(5):
                pub.publish(stored(i))
            assert pub.sequence == 0
            await pub.start()
            try:
                await asyncio.sleep(0.5)
                assert pub.sequence == 3  # 5 events in batches of at most 2
            finally:
                await pub.close()
                sub.close(linger=0)

    asyncio.run(main())


def _publish_many(pub: KvEventPublisher, n: int) -> None:
    """Publishes n events; a publish that blocked would hang here (bench/ measures speed)."""
    event = stored(1)
    for _ in range(n):
        pub.publish(event)


def test_no_subscriber_publish_never_blocks_nor_raises() -> None:
    async def main() -> None:
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        pub = KvEventPublisher(f"tcp://127.0.0.1:{port}", TOPIC, 16, False, 0)
        await pub.start()
        try:
            _publish_many(pub, 100_000)
            assert pub.sequence == 100_000 // 16
        finally:
            await pub.close()

    asyncio.run(main())


def test_subscriber_that_stops_reading_does_not_block_publishing() -> None:
    async def main() -> None:
        async with zmq_context() as ctx, connected(ctx, rcvhwm=1, batch_size=16) as (_sub, pub):
            pub.publish(stored(0))  # make sure the subscriber really is connected
            pub.publish(stored(0))
            _publish_many(pub, 100_000)
            # the subscriber is alive but got only what fits in its buffers
            assert pub.sequence == 100_002 // 16

    asyncio.run(main())


def test_overflow_drops_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    pub = KvEventPublisher("tcp://127.0.0.1:1", TOPIC, 4, False, 0, max_pending=10)
    with caplog.at_level(logging.WARNING, logger="vllm_sim.kvcache.events"):
        for i in range(25):
            pub.publish(stored(i))
    assert pub.dropped_events == 15
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_close_discards_pending_and_later_publish_is_noop() -> None:
    async def main() -> None:
        async with zmq_context() as ctx:
            sub, endpoint = await bound_sub(ctx)
            pub = KvEventPublisher(endpoint, TOPIC, 8, False, 0, flush_interval=0.2)
            await pub.start()
            pub.publish(stored(0))
            await pub.close()
            await pub.close()  # idempotent
            pub.publish(stored(1))
            for _ in range(10):
                pub.publish(stored(1))
            await asyncio.sleep(0.3)
            assert pub.sequence == 0
            assert await nothing_arrives(sub, 0.1)
            sub.close(linger=0)

    asyncio.run(main())


def test_send_error_stops_publishing_for_good(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenSocket:
        calls = 0

        def send_multipart(self, *args: Any, **kwargs: Any) -> None:
            BrokenSocket.calls += 1
            raise zmq.ZMQError(zmq.ENOTSOCK)

        def close(self, linger: int | None = None) -> None:
            pass

    async def main() -> None:
        pub = KvEventPublisher("tcp://127.0.0.1:1", TOPIC, 1, False, 0)
        await pub.start()
        real = pub._pub
        assert real is not None
        real.close(linger=0)
        pub._pub = BrokenSocket()  # type: ignore[assignment]
        with caplog.at_level(logging.ERROR, logger="vllm_sim.kvcache.events"):
            for i in range(20):
                pub.publish(stored(i))  # never raises
        assert BrokenSocket.calls == 1
        assert pub.sequence == 0
        assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1
        await pub.close()

    asyncio.run(main())


def test_live_drop_by_zmq_again_keeps_batch_replayable() -> None:
    class FullSocket:
        def send_multipart(self, *args: Any, **kwargs: Any) -> None:
            raise zmq.Again()

        def close(self, linger: int | None = None) -> None:
            pass

    async def main() -> None:
        async with zmq_context() as ctx:
            pub = KvEventPublisher(
                "tcp://127.0.0.1:1", TOPIC, 1, False, 0, replay_endpoint="tcp://127.0.0.1:*"
            )
            await pub.start()
            real = pub._pub
            assert real is not None
            real.close(linger=0)
            pub._pub = FullSocket()  # type: ignore[assignment]
            try:
                pub.publish(stored(0))
                pub.publish(stored(1))
                assert pub.sequence == 2
                replies = await replay(ctx, pub, 1)
                assert [r[1] for r in replies] == [seq8(1), seq8(2), SENTINEL[1]]
            finally:
                await pub.close()

    asyncio.run(main())


# -- replay -------------------------------------------------------------------------------


async def dealer(ctx: zmq.asyncio.Context, pub: KvEventPublisher) -> zmq.asyncio.Socket:
    assert pub.replay_address is not None
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(pub.replay_address)
    return sock


async def read_replay(sock: zmq.asyncio.Socket, timeout: float = 3.0) -> list[list[bytes]]:
    """Replies as the client sees them, `[topic, seq8, payload]`, through the sentinel."""
    out: list[list[bytes]] = []
    while True:
        frames = await recv(sock, timeout)
        assert frames[0] == b""  # delimiter, as REQ would strip it
        out.append(frames[1:])
        if frames[1:] == SENTINEL:
            return out


async def replay(ctx: zmq.asyncio.Context, pub: KvEventPublisher, start: int) -> list[list[bytes]]:
    sock = await dealer(ctx, pub)
    try:
        await sock.send_multipart([b"", seq8(start)])
        return await read_replay(sock)
    finally:
        sock.close(linger=0)


def test_replay_matches_live_batches() -> None:
    async def main() -> None:
        async with (
            zmq_context() as ctx,
            connected(ctx, batch_size=2, replay_endpoint="tcp://127.0.0.1:*") as (sub, pub),
        ):
            for i in range(8):
                pub.publish(stored(i))
            live = [await recv(sub) for _ in range(4)]
            last = int.from_bytes(live[-1][1], "big")
            assert last == pub.sequence == 4

            assert await replay(ctx, pub, last) == [live[-1], SENTINEL]
            assert await replay(ctx, pub, 1) == [*live, SENTINEL]
            assert await replay(ctx, pub, 0) == [*live, SENTINEL]
            assert await replay(ctx, pub, last + 1) == [SENTINEL]
            assert await replay(ctx, pub, 2**64 - 1) == [SENTINEL]

            # REQ works as well (one reply only: a single batch, sentinel dropped by libzmq)
            req = ctx.socket(zmq.REQ)
            req.setsockopt(zmq.LINGER, 0)
            assert pub.replay_address is not None
            req.connect(pub.replay_address)
            await req.send(seq8(last) + b"extra bytes ignored")
            assert await recv(req) == live[-1]
            req.close(linger=0)

    asyncio.run(main())


def test_replay_queue_keeps_newest_batches() -> None:
    async def main() -> None:
        async with zmq_context() as ctx:
            pub = KvEventPublisher(
                "tcp://127.0.0.1:1",
                TOPIC,
                1,
                True,
                0,
                replay_endpoint="tcp://127.0.0.1:*",
                replay_queue_size=5,
            )
            await pub.start()
            try:
                for i in range(12):
                    pub.publish(BlockRemoved((i,)))
                replies = await replay(ctx, pub, 1)
                assert [r[1] for r in replies[:-1]] == [seq8(n) for n in range(8, 13)]
                assert [unpack(r[2])[1][0]["block_hashes"] for r in replies[:-1]] == [
                    [i] for i in range(7, 12)
                ]
                assert all(r[0] == TOPIC.encode() for r in replies[:-1])
                assert replies[-1] == SENTINEL
            finally:
                await pub.close()

    asyncio.run(main())


def test_malformed_replay_requests_are_ignored() -> None:
    async def main() -> None:
        async with zmq_context() as ctx:
            pub = KvEventPublisher(
                "tcp://127.0.0.1:1", TOPIC, 1, False, 0, replay_endpoint="tcp://127.0.0.1:*"
            )
            await pub.start()
            sock = await dealer(ctx, pub)
            try:
                pub.publish(stored(0))
                await sock.send_multipart([seq8(1)])  # 2 frames at the ROUTER
                await sock.send_multipart([b"", b"12345"])  # payload shorter than 8 bytes
                await sock.send_multipart([b"", seq8(1), b"x"])  # 4 frames
                await sock.send_multipart([b"", b""])
                assert await nothing_arrives(sock, 0.3)
                await sock.send_multipart([b"", seq8(1)])
                replies = await read_replay(sock)
                assert [r[1] for r in replies] == [seq8(1), SENTINEL[1]]
            finally:
                sock.close(linger=0)
                await pub.close()

    asyncio.run(main())


@pytest.mark.timing
def test_stuck_replay_client_does_not_block_others() -> None:
    async def main() -> None:
        async with zmq_context() as ctx:
            pub = KvEventPublisher(
                "tcp://127.0.0.1:1", TOPIC, 1, False, 0, replay_endpoint="tcp://127.0.0.1:*"
            )
            await pub.start()
            stuck = await dealer(ctx, pub)
            stuck.setsockopt(zmq.RCVHWM, 1)
            good = await dealer(ctx, pub)
            try:
                big = BlockStored((BIG,), None, tuple(range(1024)), 16)  # ~3 kB per batch
                for _ in range(50):
                    pub.publish(big)
                for _ in range(200):  # 200 × 51 replies (~30 MB) that are never read
                    await stuck.send_multipart([b"", seq8(1)])
                await asyncio.sleep(0.2)
                start = time.monotonic()
                await good.send_multipart([b"", seq8(50)])
                replies = await read_replay(good, timeout=2.0)
                assert time.monotonic() - start < 2.0
                assert [r[1] for r in replies] == [seq8(50), SENTINEL[1]]
                # and live publishing goes on while the ROUTER is flooded
                _publish_many(pub, 10_000)
                assert pub.sequence >= 10_000
            finally:
                stuck.close(linger=0)
                good.close(linger=0)
                await pub.close()

    asyncio.run(main())


def test_replay_bind_failure_only_logs(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        first = KvEventPublisher(
            "tcp://127.0.0.1:1", TOPIC, 1, False, 0, replay_endpoint="tcp://127.0.0.1:*"
        )
        await first.start()
        assert first.replay_address is not None
        second = KvEventPublisher(
            "tcp://127.0.0.1:1", TOPIC, 1, False, 0, replay_endpoint=first.replay_address
        )
        with caplog.at_level(logging.ERROR, logger="vllm_sim.kvcache.events"):
            await second.start()
        assert second.replay_address is None
        assert any("replay" in r.getMessage() for r in caplog.records)
        second.publish(stored(0))
        assert second.sequence == 1  # publishing itself still works
        await second.close()
        await first.close()

    asyncio.run(main())
