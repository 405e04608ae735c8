"""`python -m bench.request_loop KIND COUNT`: COUNT requests of one kind through a whole
simulator instance in this process (the HTTP parser, the application, the pipeline, the
engine, the answer's bytes), over a transport that keeps what is written, with no socket
and no other process. Run under callgrind by bench/instructions.py, whose difference of
two counts is the instructions one request costs the server.

Kinds: `chat` and `completion` (zero latency, not streamed, ten tokens), `stream` (a chat
streamed at zero latency, ten tokens: the token path).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import sys
from collections.abc import Callable

import msgspec

from vllm_sim.config import load_config
from vllm_sim.http.connection import HttpConnection
from vllm_sim.http.state import ServerState
from vllm_sim.server.build import build_instance

MODEL = "bench-model"
ARGS = ["--model", MODEL, "--seed", "1", "--max-num-seqs", "1024", "--port", "8000"]


def _post(path: str, body: dict[str, object]) -> bytes:
    data = msgspec.json.encode(body)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


_MESSAGES = [{"role": "user", "content": "Hello"}]
REQUESTS = {
    "chat": _post(
        "/v1/chat/completions", {"model": MODEL, "messages": _MESSAGES, "max_tokens": 10}
    ),
    "completion": _post("/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 10}),
    "stream": _post(
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": _MESSAGES,
            "max_tokens": 10,
            "ignore_eos": True,
            "stream": True,
        },
    ),
}
# What marks an answer written whole: a complete answer's head (its body follows in the
# same call), a stream's chunked terminator.
_MARKS = {"chat": b"HTTP/1.1 200", "completion": b"HTTP/1.1 200", "stream": b"0\r\n\r\n"}


class KeptTransport(asyncio.Transport):
    """A transport that keeps nothing but the count of answers completed."""

    def __init__(self, mark: bytes) -> None:
        super().__init__()
        self._mark = mark
        self._head = mark.startswith(b"HTTP/")
        self.answered = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        if data.startswith(self._mark) if self._head else data.endswith(self._mark):
            self.answered += 1

    def writelines(self, list_of_data: object) -> None:
        for data in list_of_data:  # type: ignore[attr-defined]
            self.write(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


# A shared library whose `toggle()` turns callgrind's counting on or off (a client request
# of valgrind's, which Python cannot make itself): bench/instructions.py builds it, so that
# only the measured requests are counted, not the start-up nor the warm-up.
MARKER_ENV = "VLLM_SIM_BENCH_MARKER"
WARMUP = 200


def _toggle() -> Callable[[], None]:
    path = os.environ.get(MARKER_ENV)
    if not path:
        return lambda: None
    toggle: Callable[[], None] = ctypes.CDLL(path).toggle
    return toggle


async def serve(kind: str, count: int) -> int:
    loaded = load_config(ARGS, {})
    instance = build_instance(getattr(loaded, "config", loaded), 8000)
    app = instance.app
    state = ServerState(app.handle, app.max_body_bytes, max_connections=64, dialect=app.dialect)
    connection = HttpConnection(state)
    transport = KeptTransport(_MARKS[kind])
    connection.connection_made(transport)
    request = REQUESTS[kind]
    gc.freeze()
    toggle = _toggle()
    for i in range(WARMUP + count):
        if i == WARMUP:
            toggle()
        connection.data_received(request)
        while transport.answered <= i:
            await asyncio.sleep(0)
    toggle()
    return transport.answered - WARMUP


def main(argv: list[str]) -> int:
    kind, count = argv[0], int(argv[1])
    answered = asyncio.run(serve(kind, count))
    return 0 if answered == count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
