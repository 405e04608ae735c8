"""A KV-event subscriber: binds a ZMQ SUB socket, prints each batch as one JSON line.

The simulator's PUB socket connects to `--zmq-endpoint`, so whatever receives the events
binds; this listener is that receiver for a deployment (or a terminal) with no KV-cache
indexer. Each message is `[topic, seq, payload]`: the topic names the pod and model
(`kv@<ip>:<port>@<model>`), seq is an 8-byte big-endian counter, and the payload is the
msgpack array `[ts, events, data_parallel_rank]`.

    python -m vllm_sim.tools.kv_listener --bind tcp://*:5557
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO, Any

import msgspec
import zmq

_decoder = msgspec.msgpack.Decoder()
_encoder = msgspec.json.Encoder()


def batch_record(frames: Sequence[bytes]) -> dict[str, Any]:
    """One published message as a JSON-ready record; malformed ones say what was wrong."""
    if len(frames) != 3:
        return {"error": f"expected 3 frames, got {len(frames)}"}
    topic, seq, payload = frames
    record: dict[str, Any] = {
        "topic": topic.decode("utf-8", "replace"),
        "seq": int.from_bytes(seq, "big"),
    }
    try:
        ts, events, dp_rank = _decoder.decode(payload)
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        record["error"] = f"undecodable payload: {exc}"
        return record
    record.update(ts=ts, events=events, data_parallel_rank=dp_rank)
    return record


def listen(bind: str, topic: str, out: IO[bytes], limit: int = 0) -> None:
    """Receives until interrupted (or `limit` messages, when positive), one line each."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    socket = context.socket(zmq.SUB)
    socket.setsockopt(zmq.SUBSCRIBE, topic.encode())
    socket.bind(bind)
    received = 0
    try:
        while limit <= 0 or received < limit:
            line = _encoder.encode(batch_record(socket.recv_multipart()))
            out.write(line + b"\n")
            out.flush()
            received += 1
    finally:
        socket.close(linger=0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bind", default="tcp://*:5557", help="ZMQ endpoint to bind")
    parser.add_argument("--topic", default="", help="topic prefix to keep (all by default)")
    parser.add_argument("--count", type=int, default=0, help="stop after N messages")
    args = parser.parse_args(argv)
    try:
        listen(args.bind, args.topic, sys.stdout.buffer, args.count)
    except KeyboardInterrupt:
        return 0
    except zmq.ZMQError as exc:
        print(f"kv_listener: cannot bind {args.bind}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
