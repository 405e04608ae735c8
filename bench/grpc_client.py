"""The gRPC load client: closed-loop streamed Generate calls on grpc.aio.

Run as `python -m bench.grpc_client '<GrpcSpec JSON>'`: pins itself to CPU 1, keeps
`streams` calls in flight over `channels` HTTP/2 connections (each caller starts its next
call as the last one ends) and prints a LoadResult as JSON, recorded as the HTTP load
client records SSE streams: TTFT is call started -> first chunk, ITL the gap between
successive chunks (0 for the further tokens of a chunk carrying several), events every
message (the chunks and the closing one). Only what happens inside the measured window is
recorded. The client runs in its own process, never on the server's event loop.
"""

from __future__ import annotations

import asyncio
import sys
import time

import grpc
import msgspec

from bench.client import Recorder, load_result, measure_window
from bench.cpu import CLIENT_CPU, pin
from bench.spec import GrpcSpec, LoadResult
from vllm_sim.proto import engine_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["VllmEngine"].full_name
GENERATE = f"/{SERVICE}/Generate"
CONNECT_TIMEOUT = 10.0  # seconds for every channel to be ready
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.enable_http_proxy", 0),  # 127.0.0.1 is never behind a proxy
    ("grpc.use_local_subchannel_pool", 1),  # one connection per channel, not one shared
]

Generate = grpc.aio.UnaryStreamMultiCallable[pb.GenerateRequest, pb.GenerateResponse]

perf_counter = time.perf_counter


def generate_request(spec: GrpcSpec) -> pb.GenerateRequest:
    """What a tokenizing gateway sends: token ids, streamed, every token made."""
    return pb.GenerateRequest(
        tokenized=pb.TokenizedInput(input_ids=spec.input_ids),
        sampling_params=pb.SamplingParams(max_tokens=spec.max_tokens, ignore_eos=True),
        stream=True,
    )


def generate_of(channel: grpc.aio.Channel) -> Generate:
    """Generate on `channel`, typed (protoc's generated stub carries no annotations)."""
    return channel.unary_stream(
        GENERATE,
        request_serializer=pb.GenerateRequest.SerializeToString,
        response_deserializer=pb.GenerateResponse.FromString,
    )


async def one_call(generate: Generate, request: pb.GenerateRequest, rec: Recorder) -> None:
    """One streamed call, its chunks recorded as they arrive."""
    sent = last = perf_counter()
    tokens = 0  # tokens received so far in this call
    messages = 0
    async for message in generate(request):
        now = perf_counter()
        messages += 1
        inside = rec.start <= now < rec.end
        if inside:
            rec.events += 1
        if message.WhichOneof("response") != "chunk":
            continue
        first = tokens
        tokens += len(message.chunk.token_ids)
        # Tokens 1..rec.tokens count, as content events 1..tokens of an SSE stream do.
        lo, hi = first + 1, min(tokens, rec.tokens) + 1
        if lo >= hi:
            continue
        if inside:
            if lo == 1:
                rec.ttft.append(now - sent)
            else:
                rec.itl.append(now - last)
            rec.itl.extend([0.0] * (hi - lo - 1))
        last = now
    now = perf_counter()
    if rec.start <= now < rec.end:
        rec.latencies.append(now - sent)
        rec.streams += 1
        rec.stream_events += messages


async def caller(generate: Generate, request: pb.GenerateRequest, rec: Recorder) -> None:
    """One stream slot: a call after another until the run stops."""
    while not rec.stopping:
        rec.busy += 1
        try:
            await one_call(generate, request, rec)
        except grpc.aio.AioRpcError as error:
            rec.error(f"{error.code().name}: {error.details()}".encode())
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                rec.disconnects += 1
                await asyncio.sleep(0.01)  # not a busy loop against a server that is gone
        finally:
            rec.request_ended()


async def run(spec: GrpcSpec) -> LoadResult:
    rec = Recorder(spec.max_tokens)
    target = f"127.0.0.1:{spec.port}"
    channels = [
        grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) for _ in range(spec.channels)
    ]
    try:
        await asyncio.wait_for(
            asyncio.gather(*(channel.channel_ready() for channel in channels)), CONNECT_TIMEOUT
        )
        generates = [generate_of(channel) for channel in channels]
        request = generate_request(spec)
        rec.start = perf_counter() + spec.warmup
        rec.end = rec.start + spec.duration
        callers = [
            asyncio.create_task(caller(generates[i % len(generates)], request, rec))
            for i in range(spec.streams)
        ]
        before, after, unfinished = await measure_window(rec, spec.server_pid, spec.drain_timeout)
        for task in callers:
            task.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
    finally:
        for channel in channels:
            await channel.close()
    return load_result(spec.duration, rec, before, after, unfinished)


def main(argv: list[str]) -> int:
    spec = msgspec.json.decode(argv[1], type=GrpcSpec)
    pin(0, CLIENT_CPU)  # before grpc starts its threads: they inherit the pinning
    result = asyncio.run(run(spec))
    sys.stdout.buffer.write(msgspec.json.encode(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
