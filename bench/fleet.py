"""14. Fleet: 100 simulated instances from one process.

One `vllm-sim --num-instances 100` (KV events on, a pod name): its start-up time and
resident memory; every instance answers /v1/models; instance i, sent i % 3 + 1 chats,
counts exactly those in its own /metrics; the KV events each publishes (to the ZMQ port
offset by its index) name its own serving port; then an open-loop load of 10 requests a
second to every instance (1,000 a second in all) for 60 s, with errors and the achieved
rate counted.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import urllib.request

import zmq

from bench.options import Options
from bench.report import BenchReport, Figure, Unavailable
from bench.servers import simulator

NAME = "fleet"
INSTANCES = 100
RATE_EACH = 10.0  # requests a second to each instance
MODEL = "fleet-model"
_SUCCESS = re.compile(rb"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", re.MULTILINE)


def _get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return answer.status, answer.read()


def _chat(port: int, variant: int = 0) -> bytes:
    # Long enough to fill KV blocks: only full blocks are stored, and announced.
    words = b" ".join(b"word%d" % (k + 100 * variant) for k in range(40))
    body = b'{"model":"%s","messages":[{"role":"user","content":"%s"}],"max_tokens":5}' % (
        MODEL.encode(),
        words,
    )
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


async def _answer(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    await reader.readexactly(length)
    return status


async def _one_instance(
    port: int, count: int, rate: float, start: float, tally: dict[str, int]
) -> None:
    """`count` chats at `rate` a second on one keep-alive connection, from `start`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = _chat(port)
    try:
        for k in range(count):
            delay = start + k / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(request)
            try:
                status = await asyncio.wait_for(_answer(reader), 10.0)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                tally["errors"] += 1
                return
            tally["ok" if status == 200 else "errors"] += 1
    finally:
        writer.close()


async def _load(base: int, instances: int, seconds: float) -> dict[str, int]:
    tally = {"ok": 0, "errors": 0}
    count = int(RATE_EACH * seconds)
    start = time.monotonic() + 0.5
    await asyncio.gather(
        *(
            _one_instance(base + i, count, RATE_EACH, start + i / (RATE_EACH * instances), tally)
            for i in range(instances)
        )
    )
    return tally


async def _send_each(base: int, instances: int, count: int | None, variant: int) -> None:
    """Instance i gets `count` chats (i % 3 + 1 when None), one connection each."""

    async def send(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", base + i)
        for _ in range(i % 3 + 1 if count is None else count):
            writer.write(_chat(base + i, variant))
            await _answer(reader)
        writer.close()

    await asyncio.gather(*(send(i) for i in range(instances)))


def run(opts: Options) -> BenchReport:
    rep = BenchReport(NAME, f"14. Fleet: {INSTANCES} instances in one process")
    context = zmq.Context()
    zmq_port, subscribers = _subscribers(context)
    endpoint = f"tcp://127.0.0.1:{zmq_port}"
    args = ["--num-instances", str(INSTANCES), "--enable-kvcache", "--zmq-endpoint", endpoint,
            "--event-batch-size", "1", "--max-num-seqs", "64"]  # fmt: skip
    server = simulator(MODEL, args, name="fleet", env={"POD_IP": "127.0.0.1", "POD_NAME": "pod"})
    server.port = _free_range(INSTANCES, avoid=range(zmq_port, zmq_port + INSTANCES))
    server.argv[server.argv.index("--port") + 1] = str(server.port)
    try:
        with server:
            base = server.port
            rep.figures.append(Figure(NAME, "start-up s (vs 5 s)", server.started_in, 5.0, False))
            models_ok = sum(_get(base + i, "/v1/models")[0] == 200 for i in range(INSTANCES))
            asyncio.run(_send_each(base, INSTANCES, None, 0))
            own = 0
            for i in range(INSTANCES):  # before the probe below adds a request to each
                text = _get(base + i, "/metrics")[1]
                own += sum(float(v) for v in _SUCCESS.findall(text)) == i % 3 + 1
            topics_ok = _topics_ok(subscribers, base)
            rep.figures.append(
                Figure(NAME, "instances answering /v1/models", models_ok, INSTANCES, True)
            )
            rep.figures.append(
                Figure(NAME, "instances counting only their own requests", own, INSTANCES, True)
            )
            rep.figures.append(
                Figure(
                    NAME, "instances whose KV events name their port", topics_ok, INSTANCES, True
                )
            )
            seconds = 10.0 if opts.quick else 60.0
            tally = asyncio.run(_load(base, INSTANCES, seconds))
            rep.figures.append(
                Figure(
                    NAME,
                    f"load errors ({seconds:.0f} s at {RATE_EACH:g} req/s each)",
                    tally["errors"],
                    0,
                    False,
                )
            )
            rep.figures.append(
                Figure(
                    NAME,
                    "load req/s (vs offered)",
                    tally["ok"] / seconds,
                    RATE_EACH * INSTANCES,
                    True,
                )
            )
        rep.figures.append(
            Figure(NAME, "peak RSS MiB (vs 1 GiB)", server.peak_rss_mib, 1024.0, False)
        )
        rep.problems += server.problems
    finally:
        for sub in subscribers:
            sub.close(0)
        context.term()
    return rep


def _free_range(count: int, avoid: range) -> int:
    """The first of `count` consecutive free TCP ports on the loopback."""
    for first in range(20_000, 60_000, count + 7):
        if first in avoid or first + count - 1 in avoid:
            continue
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise Unavailable(f"no {count} consecutive free ports")


def _subscribers(context: zmq.Context[zmq.Socket[bytes]]) -> tuple[int, list[zmq.Socket[bytes]]]:
    """One SUB per instance, bound on consecutive ports (the publishers connect, each to
    the endpoint's port offset by its index); the first port."""
    for _ in range(20):
        first = _free_range(INSTANCES, avoid=range(0))
        subscribers: list[zmq.Socket[bytes]] = []
        try:
            for i in range(INSTANCES):
                sub = context.socket(zmq.SUB)
                subscribers.append(sub)
                sub.setsockopt(zmq.SUBSCRIBE, b"")
                sub.bind(f"tcp://127.0.0.1:{first + i}")
            return first, subscribers
        except zmq.ZMQError:
            for sub in subscribers:
                sub.close(0)
    raise Unavailable("cannot bind the KV-event subscribers")


def _topics_ok(subscribers: list[zmq.Socket[bytes]], base: int) -> int:
    """Instances whose KV events name port base + i. A PUB socket drops what it sends
    before its subscriber's subscription has come through, which its first batches can
    be: each instance silent so far gets a new prompt, until all have spoken (10 rounds)."""
    poller = zmq.Poller()
    for sub in subscribers:
        poller.register(sub, zmq.POLLIN)
    first: dict[int, bytes] = {}
    for variant in range(1, 11):
        silent = [i for i in range(len(subscribers)) if i not in first]
        if not silent:
            break
        asyncio.run(_send_to(base, silent, variant))
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            for sub, _ in poller.poll(50):
                i = subscribers.index(sub)
                first.setdefault(i, sub.recv_multipart()[0])
    good = sum(topic == f"kv@127.0.0.1:{base + i}@{MODEL}".encode() for i, topic in first.items())
    if not first:
        raise Unavailable("no KV event arrived from any instance")
    return good


async def _send_to(base: int, indices: list[int], variant: int) -> None:
    async def send(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", base + i)
        writer.write(_chat(base + i, variant))
        await _answer(reader)
        writer.close()

    await asyncio.gather(*(send(i) for i in indices))


def show(rep: BenchReport) -> None:
    from bench import report

    rows = [[f.metric, f"{f.sim:.4g}", f"{f.base:.4g}"] for f in rep.figures]
    print(report.table(["figure", "measured", "reference"], rows))
