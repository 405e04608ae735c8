"""KV-cache events: msgpack batches published over ZMQ PUB, with a ROUTER replay service.

Wire format, that of vLLM's ZMQ event publisher, so the llm-d KV-cache indexer can subscribe
unchanged: every message is `[topic, seq (8-byte big-endian), payload]`
where `payload` is the msgpack array `[ts, events, data_parallel_rank]` and `seq` starts at 1
and grows by one per batch. Events are tagged arrays (legacy, default) or maps
(`use-vllm-map-event-format`).

The publisher never blocks its caller: `publish()` appends to a bounded pending list and, once
`batch_size` events are pending, encodes and sends the batch with `zmq.NOBLOCK`. A PUB socket
drops messages for subscribers that are missing or over their high-water mark, so a slow or
absent consumer costs nothing but lost live messages. Lost batches can be fetched again from
the replay buffer, which keeps the exact payload of the newest `replay_queue_size` batches.

All methods must be called from the thread running the event loop that ran `start()`
(ZMQ sockets are not thread-safe).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import zmq
import zmq.asyncio

log = logging.getLogger("vllm_sim.kvcache.events")

MEDIUM = "GPU"
MEDIUM_CPU = "CPU"
"""The medium of the CPU offloading tier's events (vLLM's `MEDIUM_CPU`)."""
SENTINEL_SEQ = b"\xff" * 8
"""The seq frame of the replay end marker (0xFFFFFFFFFFFFFFFF)."""

PUB_SNDHWM = 1000
"""Batches queued per subscriber before the PUB socket drops them (it never blocks)."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    lora_name: str | None = None
    # The CPU offloading tier's events name their medium and KV-cache group, and a
    # self-describing one its group's kind, as vLLM's OffloadingConnector sends them; the
    # GPU's are encoded as before (see _legacy and _as_map).
    medium: str = MEDIUM
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]
    medium: str = MEDIUM
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared

_encoder = msgspec.msgpack.Encoder()


def _legacy(event: KvEvent) -> list[Any]:
    if isinstance(event, BlockStored):
        parent = 0 if event.parent_block_hash is None else event.parent_block_hash
        if event.medium != MEDIUM:
            return _offloaded_array(event, parent)
        return [
            "BlockStored",
            event.block_hashes,
            parent,
            event.token_ids,
            event.block_size,
            event.lora_id,
            MEDIUM,
            event.lora_name,
            None,  # extra_keys: always nil
        ]
    if isinstance(event, BlockRemoved):
        if event.group_idx is not None:
            return ["BlockRemoved", event.block_hashes, event.medium, event.group_idx]
        return ["BlockRemoved", event.block_hashes, event.medium]
    if isinstance(event, AllBlocksCleared):
        return ["AllBlocksCleared"]
    raise TypeError(f"not a KV event: {event!r}")


def _offloaded_array(event: BlockStored, parent: int) -> list[Any]:
    """A tier's BlockStored as a tagged array: vLLM's fields in their order, up to the last
    one set (msgspec's omit_defaults drops only trailing defaults from an array)."""
    out: list[Any] = [
        "BlockStored",
        event.block_hashes,
        parent,
        event.token_ids,
        event.block_size,
        event.lora_id,
        event.medium,
        event.lora_name,
        None,  # extra_keys
        event.group_idx,
    ]
    if event.kv_cache_spec_kind is not None:
        out.append(event.kv_cache_spec_kind)
    return out


def _offloaded_map(event: BlockStored) -> dict[str, Any]:
    """A tier's BlockStored as vLLM's msgspec map: every field without a default (lora_id
    and lora_name included, nil or not), then the optional ones that are set."""
    out: dict[str, Any] = {
        "type": "BlockStored",
        "block_hashes": event.block_hashes,
        "parent_block_hash": event.parent_block_hash,
        "token_ids": event.token_ids,
        "block_size": event.block_size,
        "lora_id": event.lora_id,
        "medium": event.medium,
        "lora_name": event.lora_name,
    }
    if event.group_idx is not None:
        out["group_idx"] = event.group_idx
    if event.kv_cache_spec_kind is not None:
        out["kv_cache_spec_kind"] = event.kv_cache_spec_kind
    return out


def _as_map(event: KvEvent) -> dict[str, Any]:
    if isinstance(event, BlockStored):
        if event.medium != MEDIUM:
            return _offloaded_map(event)
        out: dict[str, Any] = {
            "type": "BlockStored",
            "block_hashes": event.block_hashes,
            "parent_block_hash": event.parent_block_hash,
            "token_ids": event.token_ids,
            "block_size": event.block_size,
        }
        if event.lora_id is not None:
            out["lora_id"] = event.lora_id
        out["medium"] = MEDIUM
        if event.lora_name is not None:
            out["lora_name"] = event.lora_name
        return out
    if isinstance(event, BlockRemoved):
        removed: dict[str, Any] = {
            "type": "BlockRemoved",
            "block_hashes": event.block_hashes,
            "medium": event.medium,
        }
        if event.group_idx is not None:
            removed["group_idx"] = event.group_idx
        return removed
    if isinstance(event, AllBlocksCleared):
        return {"type": "AllBlocksCleared"}
    raise TypeError(f"not a KV event: {event!r}")


def encode_batch(ts: float, events: Sequence[KvEvent], dp_rank: int, map_format: bool) -> bytes:
    """The msgpack batch `[ts, events, dp_rank]`, events as tagged arrays or as maps.

    Raises TypeError for a non-event and OverflowError for an integer outside the msgpack
    range (hashes must be uint64).
    """
    convert = _as_map if map_format else _legacy
    return _encoder.encode([float(ts), [convert(e) for e in events], dp_rank])


def topic_for(pod_ip: str, port: int, model: str) -> str:
    """The message topic, `kv@<pod ip>:<serving port>@<model>`, the form the llm-d indexer
    parses to tell which pod and model a batch comes from."""
    return f"kv@{pod_ip}:{port}@{model}"


_TRAILING_PORT = re.compile(r"^(.*):([0-9]+)$", re.DOTALL)


def offset_endpoint(endpoint: str, rank: int) -> str:
    """The endpoint for data-parallel `rank`: its trailing `:<port>` plus rank, as vLLM offsets
    it, so each rank publishes on its own port.

    Endpoints without a trailing integer port, and rank 0, are returned unchanged.
    """
    if rank == 0:
        return endpoint
    match = _TRAILING_PORT.match(endpoint)
    if match is None:
        return endpoint
    return f"{match.group(1)}:{int(match.group(2)) + rank}"


class KvEventPublisher:
    """Batches KV events and publishes them on a connecting PUB socket; serves replays.

    Events published before `start()` are kept (up to `max_pending`) and sent by the first
    timer flush; events published after `close()` or after a fatal send error are discarded.
    """

    def __init__(
        self,
        endpoint: str,
        topic: str,
        batch_size: int,
        map_format: bool,
        dp_rank: int,
        replay_endpoint: str = "",
        replay_queue_size: int = 1024,
        flush_interval: float = 1.0,
        max_pending: int = 10240,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if replay_queue_size < 1:
            raise ValueError("replay_queue_size must be at least 1")
        if flush_interval <= 0:
            raise ValueError("flush_interval must be positive")
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._endpoint = endpoint
        self._topic = topic.encode()
        self._batch_size = batch_size
        self._map_format = map_format
        self._dp_rank = dp_rank
        self._replay_endpoint = replay_endpoint
        self._replay_queue_size = replay_queue_size
        self._flush_interval = flush_interval
        self._max_pending = max_pending

        self._pending: list[KvEvent] = []
        self._seq = 0
        self._replay: deque[tuple[int, bytes]] = deque(maxlen=replay_queue_size)
        self._pub: zmq.Socket[bytes] | None = None
        self._router: zmq.asyncio.Socket | None = None
        self._replay_address: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._last_flush = time.monotonic()
        self._started = False
        self._closed = False
        self._failed = False
        self._overflowing = False
        self._dropped = 0
        self._encode_failed = False

    @property
    def sequence(self) -> int:
        """The seq of the last published batch (0 before any)."""
        return self._seq

    @property
    def dropped_events(self) -> int:
        """Events dropped because `max_pending` events were already pending."""
        return self._dropped

    @property
    def replay_address(self) -> str | None:
        """The endpoint the replay ROUTER is bound to (resolves `*` ports), None if none."""
        return self._replay_address

    # -- request path -------------------------------------------------------------------

    def publish(self, event: KvEvent) -> None:
        """Queues an event; sends the batch at once when `batch_size` events are pending.

        Never blocks and never raises.
        """
        if self._closed or self._failed:
            return
        pending = self._pending
        if len(pending) >= self._max_pending:
            self._dropped += 1
            if not self._overflowing:
                self._overflowing = True
                log.warning(
                    "KV event queue full (%d pending events); dropping events", len(pending)
                )
            return
        pending.append(event)
        if len(pending) >= self._batch_size and self._pub is not None:
            self._flush()

    def _flush(self) -> None:
        """Sends everything pending, in batches of at most `batch_size` events."""
        self._last_flush = time.monotonic()
        size = self._batch_size
        while self._pending and self._pub is not None:
            if len(self._pending) <= size:
                batch, self._pending = self._pending, []
            else:
                batch = self._pending[:size]
                del self._pending[:size]
            self._send_batch(batch)
        self._overflowing = False

    def _send_batch(self, events: list[KvEvent]) -> None:
        pub = self._pub
        assert pub is not None
        try:
            payload = encode_batch(time.time_ns() / 1e9, events, self._dp_rank, self._map_format)
        except Exception:
            if not self._encode_failed:
                self._encode_failed = True
                log.exception("cannot encode a KV event batch; batch dropped")
            return
        seq = self._seq + 1
        try:
            pub.send_multipart([self._topic, seq.to_bytes(8, "big"), payload], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # dropped live, like a PUB over its high-water mark; still replayable
        except Exception:
            log.exception("KV event publishing failed; no further KV events will be published")
            self._fail()
            return
        self._seq = seq
        self._replay.append((seq, payload))

    def _fail(self) -> None:
        self._failed = True
        self._pending = []
        if self._pub is not None:
            with contextlib.suppress(Exception):
                self._pub.close(linger=0)
            self._pub = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Connects the PUB socket, binds the replay ROUTER and starts the background tasks.

        A malformed `endpoint` raises `zmq.ZMQError`; a replay bind failure is only logged.
        """
        if self._started:
            raise RuntimeError("KV event publisher already started")
        self._started = True
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        pub: zmq.Socket[bytes] = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.setsockopt(zmq.SNDHWM, PUB_SNDHWM)
        try:
            pub.connect(self._endpoint)
        except zmq.ZMQError:
            pub.close(linger=0)
            raise
        self._pub = pub
        self._last_flush = time.monotonic()

        if self._replay_endpoint:
            router = zmq.asyncio.Socket(ctx, zmq.ROUTER)
            router.setsockopt(zmq.LINGER, 0)
            router.setsockopt(zmq.ROUTER_MANDATORY, 0)  # drop, never block or fail, per peer
            # room for one complete replay per reading client
            router.setsockopt(zmq.SNDHWM, max(1000, 2 * (self._replay_queue_size + 1)))
            try:
                router.bind(self._replay_endpoint)
            except zmq.ZMQError as exc:
                log.error(
                    "cannot bind KV events replay endpoint %s: %s; replay unavailable",
                    self._replay_endpoint,
                    exc,
                )
                router.close(linger=0)
            else:
                self._router = router
                self._replay_address = router.getsockopt_string(zmq.LAST_ENDPOINT)
                self._tasks.append(asyncio.create_task(self._replay_loop(router)))

        self._tasks.append(asyncio.create_task(self._flush_loop()))

    async def close(self) -> None:
        """Stops the tasks and closes the sockets (linger 0); pending events are discarded."""
        if self._closed:
            return
        self._closed = True
        self._pending = []
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []
        if self._pub is not None:
            self._pub.close(linger=0)
            self._pub = None
        if self._router is not None:
            self._router.close(linger=0)
            self._router = None

    async def _flush_loop(self) -> None:
        interval = self._flush_interval
        while not self._failed:
            delay = self._last_flush + interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            self._flush()

    # -- replay ---------------------------------------------------------------------------

    async def _replay_loop(self, router: zmq.asyncio.Socket) -> None:
        while True:
            try:
                frames = await router.recv_multipart()
            except zmq.ZMQError as exc:
                if not self._closed:
                    log.error("KV events replay socket failed: %s; replay stopped", exc)
                return
            if len(frames) != 3 or len(frames[2]) < 8:
                continue  # malformed: no reply
            identity = frames[0]
            start = int.from_bytes(frames[2][:8], "big")
            matches = [entry for entry in self._replay if entry[0] >= start]
            for count, (seq, payload) in enumerate(matches, 1):
                self._reply(router, [identity, b"", self._topic, seq.to_bytes(8, "big"), payload])
                if count % 64 == 0:
                    await asyncio.sleep(0)  # long replays must not starve the event loop
            self._reply(router, [identity, b"", b"", SENTINEL_SEQ, b""])
            await asyncio.sleep(0)

    @staticmethod
    def _reply(router: zmq.asyncio.Socket, frames: list[bytes]) -> None:
        """Sends without blocking; a reply to a peer over its high-water mark is dropped."""
        future = router.send_multipart(frames, flags=zmq.NOBLOCK)
        if isinstance(future, asyncio.Future):
            if future.done():
                if not future.cancelled() and future.exception() is not None:
                    log.debug("KV events replay reply dropped: %s", future.exception())
            else:
                future.add_done_callback(_consume_result)


def _consume_result(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
