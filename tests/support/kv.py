"""Helpers for the KV-cache end-to-end tests: a real server, a real ZMQ subscriber.

Nothing here imports the simulator's own KV code. Block hashes are computed by a small
canonical-CBOR encoder and FNV-1a-64 written for these tests, chained as the llm-d router
chains them, and event batches are decoded with plain `msgpack` following vLLM's published
schema (`vllm.distributed.kv_events`): `EventBatch = [ts, events, data_parallel_rank]`,
tagged array events `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
lora_id, medium, lora_name, extra_keys]`, `["BlockRemoved", block_hashes, medium]`,
`["AllBlocksCleared"]`, or the same as maps with a `type` key. vLLM's later optional
fields (`group_idx`, `kv_cache_spec_kind`, ...: the CPU offloading tier's events set
`group_idx`) follow in its order where set.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgpack  # type: ignore[import-untyped, unused-ignore]
import zmq

from tests.support.http import post_sse
from tests.support.server import SimServer

MODEL = "test-model"
POD_IP = "10.9.8.7"
BS = 16
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"

# The llm-d router's test vector V1: seed "", model test-model, block size 16, tokens 1..40.
V1_TOKENS = list(range(1, 41))
V1_HASHES = [9540012594951042066, 16921089685996993662]


# --------------------------------------------------------------------------------------------
# Independent block hashes: canonical CBOR + FNV-1a-64
# --------------------------------------------------------------------------------------------


def _cbor_head(major: int, value: int) -> bytes:
    if value < 24:
        return bytes([(major << 5) | value])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if value < 1 << (8 * size):
            return bytes([(major << 5) | info]) + value.to_bytes(size, "big")
    raise ValueError(value)


def cbor(value: object) -> bytes:
    """Canonical CBOR of None, unsigned ints, strings, lists and str-keyed dicts."""
    if value is None:
        return b"\xf6"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return _cbor_head(0, value)
    if isinstance(value, str):
        raw = value.encode()
        return _cbor_head(3, len(raw)) + raw
    if isinstance(value, list):
        return _cbor_head(4, len(value)) + b"".join(cbor(v) for v in value)
    if isinstance(value, dict):
        items = sorted((cbor(k), cbor(v)) for k, v in value.items())
        items.sort(key=lambda kv: len(kv[0]))
        return _cbor_head(5, len(items)) + b"".join(k + v for k, v in items)
    raise TypeError(type(value))


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def chain(
    tokens: Sequence[int],
    model: str = MODEL,
    seed: str = "",
    block_size: int = BS,
    extras: Sequence[object] | None = None,
) -> list[int]:
    """The llm-d block-hash chain of the prompt's full blocks."""
    parent = fnv1a64(cbor([fnv1a64(seed.encode()), None, model]))
    out: list[int] = []
    for i in range(len(tokens) // block_size):
        block = list(tokens[i * block_size : (i + 1) * block_size])
        extra = extras[i] if extras is not None else None
        parent = fnv1a64(cbor([parent, block, extra]))
        out.append(parent)
    return out


def block_tokens(tokens: Sequence[int], index: int, block_size: int = BS) -> list[int]:
    return list(tokens[index * block_size : (index + 1) * block_size])


def distinct(tag: int, n_blocks: int, extra: int = 0) -> list[int]:
    """A prompt of `n_blocks` full blocks (+`extra` tokens) that shares nothing with others."""
    base = 100_000 + tag * 1000
    return list(range(base, base + n_blocks * BS + extra))


# --------------------------------------------------------------------------------------------
# Event decoding (vLLM's schema, both encodings)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: Any = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


@dataclass(frozen=True)
class Removed:
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


@dataclass(frozen=True)
class Cleared:
    pass


Event = Stored | Removed | Cleared

_STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "locality",
    "ownership",
    "session_id",
)
_REMOVED_FIELDS = ("block_hashes", "medium", "group_idx", "locality", "ownership")


def _fields(raw: Any, names: Sequence[str], map_format: bool) -> dict[str, Any]:
    if map_format:
        assert isinstance(raw, dict), raw
        unknown = set(raw) - {"type", *names}
        assert not unknown, f"unexpected keys {unknown} in {raw}"
        return {name: raw.get(name) for name in names}
    assert isinstance(raw, list), raw
    values = raw[1:]
    assert len(values) <= len(names), raw
    # vLLM omits trailing defaults (msgspec omit_defaults): absent positions are nil.
    return {name: values[i] if i < len(values) else None for i, name in enumerate(names)}


def decode_event(raw: Any, map_format: bool) -> Event:
    tag = raw.get("type") if map_format and isinstance(raw, dict) else raw[0]
    if tag == "BlockStored":
        fields = _fields(raw, _STORED_FIELDS, map_format)
        if not map_format and fields["parent_block_hash"] == 0:
            fields["parent_block_hash"] = None  # the legacy array writes "no parent" as 0
        return Stored(**fields)
    if tag == "BlockRemoved":
        return Removed(**_fields(raw, _REMOVED_FIELDS, map_format))
    if tag == "AllBlocksCleared":
        _fields(raw, (), map_format)
        return Cleared()
    raise AssertionError(f"unknown event {raw!r}")


@dataclass
class Message:
    frames: list[bytes]
    arrived: float  # time.monotonic()
    raw_events: list[Any]
    events: list[Event]
    ts: float
    rank: int

    @property
    def topic(self) -> bytes:
        return self.frames[0]

    @property
    def seq(self) -> int:
        return int.from_bytes(self.frames[1], "big")

    @property
    def payload(self) -> bytes:
        return self.frames[2]


def unpack(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


def decode_message(frames: list[bytes], map_format: bool) -> Message:
    assert len(frames) == 3, frames
    assert len(frames[1]) == 8, frames[1]
    batch = unpack(frames[2])
    assert isinstance(batch, list) and len(batch) == 3, batch
    ts, raw_events, rank = batch
    assert isinstance(ts, float), batch
    assert abs(ts - time.time()) < 120, ts
    assert type(rank) is int, batch
    assert isinstance(raw_events, list), batch
    events = [decode_event(raw, map_format) for raw in raw_events]
    return Message(frames, time.monotonic(), raw_events, events, ts, rank)


# --------------------------------------------------------------------------------------------
# The subscriber
# --------------------------------------------------------------------------------------------


class Subscriber:
    """A SUB socket bound on loopback (the simulator's PUB connects to it).

    `contents` is the cache rebuilt from every event received after `sync`.
    """

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], map_format: bool, rcvhwm: int) -> None:
        self.map_format = map_format
        self.sock: zmq.Socket[bytes] = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.topic = b""
        self.last_seq = 0
        self.messages: list[Message] = []  # every message after sync, in order
        self.contents: set[int] = set()
        self.cpu_contents: set[int] = set()  # the CPU offloading tier's (medium CPU)

    def recv(self, timeout: float) -> Message | None:
        """The next message (checked: 3 frames, topic, seq = previous + 1), or None."""
        if not self.sock.poll(int(timeout * 1000)):
            return None
        message = decode_message(self.sock.recv_multipart(), self.map_format)
        if self.topic:
            assert message.topic == self.topic, message.topic
            assert message.seq == self.last_seq + 1, (message.seq, self.last_seq)
            assert message.rank == 0
        self.last_seq = message.seq
        return message

    def sync(self, client: httpx.Client, wait: float = 0.5) -> None:
        """Waits for the PUB to be connected: `/sleep` (one AllBlocksCleared each, no blocks
        stored) until an event arrives, then drains. The cache is empty afterwards."""
        got = None
        for _ in range(40):
            assert client.post("/sleep").status_code == 200
            got = self.recv(wait)
            assert client.post("/wake_up").status_code == 200
            if got is not None:
                break
        assert got is not None, "the simulator's PUB never reached the test SUB"
        drained = [got]
        while (more := self.recv(0.3 if wait < 1 else wait)) is not None:
            drained.append(more)
        for message in drained:
            assert message.events and all(isinstance(e, Cleared) for e in message.events)
        seqs = [m.seq for m in drained]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
        self.topic = got.topic
        self.contents = set()

    def take_events(self, count: int, timeout: float = 3.0) -> list[Event]:
        """Exactly `count` events (whole messages), applied to `contents`."""
        events: list[Event] = []
        deadline = time.monotonic() + timeout
        while len(events) < count:
            message = self.recv(max(0.0, deadline - time.monotonic()))
            assert message is not None, f"got {len(events)} of {count} events: {events}"
            self.messages.append(message)
            events += message.events
        assert len(events) == count, events
        for event in events:
            self.apply(event)
        return events

    def quiet(self, wait: float = 0.3) -> None:
        message = self.recv(wait)
        assert message is None, f"unexpected message: {message.events if message else None}"

    def apply(self, event: Event) -> None:
        if isinstance(event, Stored | Removed) and event.medium == "CPU":
            if isinstance(event, Stored):
                self.cpu_contents.update(event.block_hashes)
            else:
                for block_hash in event.block_hashes:
                    assert block_hash in self.cpu_contents, f"unknown block removed: {event}"
                    self.cpu_contents.discard(block_hash)
            return
        if isinstance(event, Stored):
            # A block may be stored again: as vLLM, a request stores every block it computes,
            # and a prompt found whole computes its last block (of the same hash) again.
            self.contents.update(event.block_hashes)
        elif isinstance(event, Removed):
            assert len(event.block_hashes) == 1, event
            assert event.block_hashes[0] in self.contents, f"unknown block removed: {event}"
            self.contents.discard(event.block_hashes[0])
        else:
            self.contents.clear()


@contextlib.contextmanager
def kv_server(
    args: Sequence[str] = (),
    *,
    map_format: bool = False,
    batch: int = 1,
    rcvhwm: int = 10_000,
    sync: bool = True,
    env: dict[str, str] | None = None,
    model: str = MODEL,
) -> Iterator[tuple[SimServer, Subscriber, httpx.Client]]:
    """A simulator with the KV cache on, sleep mode on (used to sync), publishing to a SUB,
    reporting cached prompt tokens in usage (vLLM does only when asked to)."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sub = Subscriber(ctx, map_format, rcvhwm)
    flags = [
        "--enable-kvcache",
        "--enable-sleep-mode",
        "--enable-prompt-tokens-details",
        "--zmq-endpoint",
        sub.endpoint,
        "--event-batch-size",
        str(batch),
        "--hash-seed",
        "",
        *(["--use-vllm-map-event-format"] if map_format else []),
        *args,
    ]
    full_env = {"POD_IP": POD_IP, "VLLM_SERVER_DEV_MODE": "1", "PYTHONHASHSEED": "", **(env or {})}
    try:
        with (
            SimServer(flags, env=full_env, model=model) as sim,
            httpx.Client(base_url=sim.url, timeout=30) as client,
        ):
            if sync:
                sub.sync(client, wait=0.5 if batch == 1 else 1.5)
            yield sim, sub, client
    finally:
        sub.sock.close(linger=0)
        ctx.term()


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------


def complete(
    client: httpx.Client, tokens: Sequence[int], status: int = 200, **extra: Any
) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": list(tokens), "max_tokens": 1, **extra}
    response = client.post(COMPLETIONS, json=body)
    assert response.status_code == status, response.text
    result: dict[str, Any] = response.json()
    return result


def cached_tokens(answer: dict[str, Any]) -> int:
    """The cached prompt tokens an answer (or a stream's usage chunk) reports. As vLLM 0.32
    under --enable-prompt-tokens-details: the details object on every answer, 0 included,
    with `created_cache_tokens` and `multimodal_tokens` beside (a stream's usage chunk
    leaves the null ones out); null details mean the flag is off."""
    usage = answer["usage"]
    streamed = "completion_tokens_details" not in usage  # the usage chunk drops null details
    details = usage.get("prompt_tokens_details")
    if details is None:
        return 0
    assert isinstance(details, dict), usage
    if streamed:
        assert "cached_tokens" in details, usage
        assert set(details) <= {"cached_tokens", "created_cache_tokens"}, usage
    else:
        assert set(details) == {"cached_tokens", "created_cache_tokens", "multimodal_tokens"}
        assert details["multimodal_tokens"] is None, usage
    value = details["cached_tokens"]
    assert type(value) is int and value >= 0, usage
    return value


@dataclass
class StreamResult:
    status: int
    first_data: float | None = None  # seconds from send to the first SSE data event
    chunks: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    body: bytes = b""


def stream(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> StreamResult:
    reply = post_sse(client, path, {**body, "stream": True}, headers)
    result = StreamResult(reply.status, body=reply.body)
    for at, data in reply.data:
        if result.first_data is None:
            result.first_data = at
        if data == "[DONE]":
            assert not result.done, "two [DONE]"
            result.done = True
            continue
        assert not result.done, "data after [DONE]"
        result.chunks.append(json.loads(data))
    return result


# --------------------------------------------------------------------------------------------
# An independent model of the cache (sequential requests)
# --------------------------------------------------------------------------------------------


class CacheModel:
    """What the simulator must hold: blocks cached in release groups, oldest group first.

    Requests are run one at a time. A request's hit is the longest run of leading blocks
    present, capped as vLLM caps it: at least the last prompt token is computed, so at most
    (tokens - 1) // block size blocks. Every block after the hit is computed and stored (one
    BlockStored for them all, parent the hit's last block): one still present is taken back
    (stored again, evicting nothing), one absent takes the room of the oldest unused block
    when the cache is full. Blocks released together tie: any of the oldest group may go, so
    the model follows the victims the events name and checks each was one of the oldest.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.groups: list[list[int]] = []

    def contents(self) -> set[int]:
        return {h for group in self.groups for h in group}

    def _take(self, h: int) -> None:
        for group in self.groups:
            if h in group:
                group.remove(h)
        self.groups = [g for g in self.groups if g]

    @staticmethod
    def hit_of(tokens: Sequence[int], present: set[int]) -> int:
        """The cached prefix in blocks: leading blocks present, at most (tokens - 1) // BS."""
        hashes = chain(tokens)
        limit = max(len(tokens) - 1, 0) // BS
        hit = 0
        while hit < min(limit, len(hashes)) and hashes[hit] in present:
            hit += 1
        return hit

    def request(self, tokens: Sequence[int], events: Sequence[Event]) -> int:
        """Checks the request's events; returns the cached prefix in blocks."""
        hashes = chain(tokens)
        hit = self.hit_of(tokens, self.contents())
        for h in hashes[:hit]:
            self._take(h)
        held = hit
        removals = [e for e in events if isinstance(e, Removed)]
        n_evict = 0
        for h in hashes[hit:]:
            if h in self.contents():
                self._take(h)  # taken back: the cache holds as many blocks as before
            else:
                unused = sum(len(g) for g in self.groups)
                if held + unused >= self.capacity and unused:
                    assert n_evict < len(removals), f"expected an eviction, got {events}"
                    victim = removals[n_evict].block_hashes
                    assert len(victim) == 1 and victim[0] in self.groups[0], (
                        f"evicted {victim}, not one of the oldest unused {self.groups[0]}"
                    )
                    self._take(victim[0])
                    n_evict += 1
            held += 1
        expected: list[Event] = list(removals[:n_evict])
        if hit < len(hashes):
            expected.append(
                Stored(
                    block_hashes=hashes[hit:],
                    parent_block_hash=hashes[hit - 1] if hit else None,
                    token_ids=list(tokens[hit * BS : len(hashes) * BS]),
                    block_size=BS,
                    lora_id=None,
                    medium="GPU",
                    lora_name=None,
                )
            )
        assert list(events) == expected, (events, expected)
        self.groups.append(list(hashes))
        return hit

    def expected_event_count(self, tokens: Sequence[int]) -> int:
        """How many events the request must produce (evictions + one BlockStored unless the
        hit is the whole chain)."""
        hashes = chain(tokens)
        present = self.contents()
        hit = self.hit_of(tokens, present)
        held = hit
        unused = len(present) - hit
        evictions = 0
        for h in hashes[hit:]:
            if h in present:
                unused -= 1  # taken back
            elif held + unused >= self.capacity and unused:
                evictions += 1
                unused -= 1
            held += 1
        return evictions + (1 if hit < len(hashes) else 0)
