"""5. KV-cache cost: zero-latency chat throughput with prefix caching and KV events.

Block accounting is always on. Five simulators side by side: prefix caching off (blocks
counted, nothing hashed); prefix caching on (the default: prompts hashed and shared); and
KV events on (--enable-kvcache) with nobody subscribed, with a subscriber that reads
everything, and with one that stops reading. Neither hashing nor event publishing may slow
requests down much, and events not at all whoever listens.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import msgspec
import zmq

from bench import report
from bench.load import alternate, running
from bench.options import Options
from bench.report import BenchReport, Column, Figure, best_round
from bench.servers import Server, free_port, simulator
from bench.spec import LoadResult, LoadSpec

NAME = "kv"
CONNECTIONS = 64
PROMPT_WORDS = 80  # five full blocks of 16 tokens once rendered
OFF, PREFIX, SILENT, READING, STUCK = (
    "no prefix caching",
    "prefix caching",
    "events, no subscriber",
    "events, reader",
    "events, stuck reader",
)

COLUMNS: list[Column] = [
    ("req/s", lambda r: report.rate(r.rate)),
    ("p50 ms", lambda r: report.ms(r.latency.p50)),
    ("p99 ms", lambda r: report.ms(r.latency.p99)),
    *report.CPU_COLUMNS,
]


def _body(model: str) -> str:
    content = " ".join(f"word{i}" for i in range(PROMPT_WORDS))
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 10}
    return msgspec.json.encode(body).decode()


def _kv_server(model: str, name: str, zmq_port: int) -> Server:
    args = ["--max-num-seqs", "1024", "--enable-kvcache", "--kv-cache-size", "100000"]
    args += ["--zmq-endpoint", f"tcp://127.0.0.1:{zmq_port}", "--event-batch-size", "16"]
    return simulator(model, args, name=name, env={"POD_IP": "127.0.0.1"})


@contextlib.contextmanager
def _subscribers(reading_port: int, stuck_port: int) -> Iterator[None]:
    """A SUB that drains its socket in a thread, and one that never reads."""
    context = zmq.Context()
    reader = context.socket(zmq.SUB)
    reader.bind(f"tcp://127.0.0.1:{reading_port}")
    reader.subscribe(b"")
    stuck = context.socket(zmq.SUB)
    stuck.setsockopt(zmq.RCVHWM, 1)
    stuck.bind(f"tcp://127.0.0.1:{stuck_port}")
    stuck.subscribe(b"")
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            if reader.poll(100):
                reader.recv_multipart()

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        reader.close(linger=0)
        stuck.close(linger=0)
        context.term()


def requests_per_second(result: LoadResult) -> float:
    return result.rate


def run(opts: Options) -> BenchReport:
    warmup, duration, rounds = opts.plan(full=(1.0, 4.0, 3), quick=(1.0, 2.0, 2))
    title = (
        f"5. KV cache and events, zero latency: {CONNECTIONS} connections, an 80-word prompt; "
        f"best of {rounds} alternating rounds of {duration:g} s after {warmup:g} s warm-up"
    )
    spec = LoadSpec(
        port=0, body=_body(opts.model), connections=CONNECTIONS, warmup=warmup, duration=duration
    )
    reading_port, stuck_port = free_port(), free_port()
    servers = [
        simulator(opts.model, ["--max-num-seqs", "1024", "--no-enable-prefix-caching"], name=OFF),
        simulator(opts.model, ["--max-num-seqs", "1024"], name=PREFIX),
        _kv_server(opts.model, SILENT, free_port()),
        _kv_server(opts.model, READING, reading_port),
        _kv_server(opts.model, STUCK, stuck_port),
    ]
    rep = BenchReport(NAME, title)
    with _subscribers(reading_port, stuck_port), running(servers):
        per_server = alternate(servers, spec, rounds)
    rep.problems += report.server_problems(servers)
    for server, results in zip(servers, per_server, strict=True):
        rep.runs.append(best_round(server.name, CONNECTIONS, results, requests_per_second))
    off = rep.load(OFF, CONNECTIONS)
    for name in (PREFIX, SILENT, READING, STUCK):
        rep.figures.append(
            Figure(NAME, f"req/s {name} vs off", rep.load(name, CONNECTIONS).rate, off.rate, True)
        )
    return rep


def show(rep: BenchReport) -> None:
    print(report.runs_table(rep.runs, COLUMNS))
