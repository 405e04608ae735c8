"""Helpers for the vLLM-native end-to-end tests: generate bodies and streams, LoRA info
series, consecutive free ports, ZMQ subscribers for data-parallel KV events."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import msgpack
import zmq

from tests.support.metrics import LORA_INFO, Metrics

GENERATE = "/inference/v1/generate"
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
LOAD = "/v1/load_lora_adapter"
UNLOAD = "/v1/unload_lora_adapter"
POD_IP = "10.11.12.13"
MODEL = "test-model"  # SimServer's default --model
# The kv_transfer_params of a P/D prefill answer.
TRANSFER_KEYS = frozenset(
    {
        "do_remote_decode",
        "do_remote_prefill",
        "remote_engine_id",
        "remote_block_ids",
        "remote_host",
        "remote_port",
        "tp_size",
    }
)


def gen_body(
    token_ids: Sequence[object], max_tokens: int | None = None, **extra: Any
) -> dict[str, Any]:
    """A generate body; ids are `object`s so that invalid ones can be sent too."""
    params: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
    return {"token_ids": list(token_ids), "sampling_params": params, **extra}


@dataclass
class Sse:
    """A streamed answer: its status, content type and decoded `data:` frames."""

    status: int
    content_type: str
    frames: list[dict[str, Any]]
    done: bool
    done_last: bool
    body: bytes


def stream_post(client: httpx.Client, path: str, body: dict[str, Any]) -> Sse:
    """POSTs a streaming request; checks each frame is `data: <json>` followed by a blank line."""
    with client.stream("POST", path, json=body) as response:
        raw = response.read()
        content_type = response.headers.get("content-type", "")
    if response.status_code != 200:
        return Sse(response.status_code, content_type, [], False, False, raw)
    text = raw.decode()
    assert text.endswith("\n\n"), text
    chunks = text[: -len("\n\n")].split("\n\n")
    frames: list[dict[str, Any]] = []
    done = False
    for chunk in chunks:
        assert chunk.startswith("data: "), chunk
        data = chunk[len("data: ") :]
        if data == "[DONE]":
            assert not done, "two [DONE] frames"
            done = True
            continue
        assert not done, "a frame after [DONE]"
        frames.append(json.loads(data))
    return Sse(200, content_type, frames, done, chunks[-1] == "data: [DONE]", raw)


# --- vllm:lora_requests_info ----------------------------------------------------------------


def lora_states(metrics: Metrics) -> dict[tuple[str, str], float]:
    """(running csv, waiting csv) -> value, for every lora_requests_info series exposed."""
    states: dict[tuple[str, str], float] = {}
    for labels, value in metrics.series(LORA_INFO):
        key = (labels["running_lora_adapters"], labels["waiting_lora_adapters"])
        assert key not in states, key
        states[key] = value
    return states


def csv_set(text: str) -> frozenset[str]:
    return frozenset(name for name in text.split(",") if name)


def newest_states(metrics: Metrics) -> set[tuple[frozenset[str], frozenset[str]]]:
    """The states stamped with the newest value (ties are possible: whole seconds)."""
    states = lora_states(metrics)
    newest = max(states.values())
    return {(csv_set(r), csv_set(w)) for (r, w), value in states.items() if value == newest}


# --- ports and processes -----------------------------------------------------------------------


def consecutive_free_ports(count: int) -> int:
    """A port P such that P .. P+count-1 were all free on loopback a moment ago."""
    for _ in range(200):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            base: int = first.getsockname()[1]
            if base + count > 65535:
                continue
            others: list[socket.socket] = []
            try:
                for offset in range(1, count):
                    sock = socket.socket()
                    others.append(sock)
                    sock.bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            finally:
                for sock in others:
                    sock.close()
            return base
    raise RuntimeError("no run of consecutive free ports")


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_healthy(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"port {port} never became healthy"
        time.sleep(0.05)


# --- ZMQ ---------------------------------------------------------------------------------------


@dataclass
class Batch:
    topic: bytes
    seq: int
    ts: float
    events: list[Any]
    rank: int


def bind_subs(
    ctx: zmq.Context[zmq.Socket[bytes]], count: int
) -> tuple[int, list[zmq.Socket[bytes]]]:
    """SUB sockets bound on `count` consecutive loopback ports; (first port, sockets)."""
    for _ in range(100):
        socks: list[zmq.Socket[bytes]] = []
        try:
            first = ctx.socket(zmq.SUB)
            socks.append(first)
            base = first.bind_to_random_port("tcp://127.0.0.1", min_port=20000, max_port=60000)
            for offset in range(1, count):
                sock = ctx.socket(zmq.SUB)
                socks.append(sock)
                sock.bind(f"tcp://127.0.0.1:{base + offset}")
        except zmq.ZMQError:
            for sock in socks:
                sock.close(linger=0)
            continue
        for sock in socks:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        return base, socks
    raise RuntimeError("no run of consecutive free ZMQ ports")


def recv_batch(sock: zmq.Socket[bytes], timeout: float) -> Batch | None:
    """The next `[topic, seq, msgpack [ts, events, rank]]` message, or None."""
    if not sock.poll(int(timeout * 1000)):
        return None
    frames = sock.recv_multipart()
    assert len(frames) == 3, frames
    assert len(frames[1]) == 8, frames
    payload = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
    assert isinstance(payload, list) and len(payload) == 3, payload
    ts, events, rank = payload
    assert isinstance(ts, float) and isinstance(events, list) and type(rank) is int, payload
    return Batch(frames[0], int.from_bytes(frames[1], "big"), ts, events, rank)


def drain(sock: zmq.Socket[bytes], quiet: float = 0.3) -> list[Batch]:
    batches = []
    while (batch := recv_batch(sock, quiet)) is not None:
        batches.append(batch)
    return batches


def prompt(tag: int, blocks: int = 2, block_size: int = 16) -> list[int]:
    """Token ids no other prompt of these tests shares (so every request stores blocks)."""
    return [tag * 1000 + i for i in range(blocks * block_size)]


def first_batch(
    client: httpx.Client, sock: zmq.Socket[bytes], tag: int, attempts: int = 40
) -> Batch:
    """Sends distinct prompts until a batch reaches `sock` (a PUB connects lazily: the first
    batches may be lost); returns that batch after draining whatever followed it."""
    for attempt in range(attempts):
        answer = client.post(GENERATE, json=gen_body(prompt(tag * 100 + attempt), 1))
        assert answer.status_code == 200, answer.text
        batch = recv_batch(sock, 0.25)
        if batch is not None:
            drain(sock)
            return batch
    raise AssertionError("no KV event batch ever arrived")
