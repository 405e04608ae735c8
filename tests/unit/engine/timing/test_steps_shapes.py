"""The curves the step loop must draw, with the roofline model of Llama-3.1-8B on an H100
and a virtual clock: what routers, autoscalers and capacity planners test against."""

from __future__ import annotations

import asyncio
import random
from itertools import count

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, run_virtual
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import RequestStream
from vllm_sim.engine.timing.steps import StepLoop
from vllm_sim.perf import RooflineModel, StepLoad, gpu_spec, preset_for

_ids = count(10_000)


def roofline() -> RooflineModel:
    shape = preset_for("meta-llama/Llama-3.1-8B-Instruct")
    assert shape is not None
    return RooflineModel(shape, gpu_spec("H100"))


def engine(max_num_seqs: int, tokens: int, budget: int = 8192) -> Engine:
    return Engine(
        EngineLimits(max_num_seqs, 100_000, 100_000),
        LatencySettings(max_num_seqs=max_num_seqs),
        FixedContent(tokens),
        random.Random(0),
        scheduler=LoopClockScheduler(),
        timing=StepLoop(roofline(), budget),
    )


def request(prompt_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        f"r{next(_ids)}", "m", [Prompt([next(_ids) for _ in range(prompt_tokens)])]
    )


def ttft(stream: RequestStream) -> float:
    seq = stream.sequences[0]
    assert seq.t_first_token is not None
    return seq.t_first_token - seq.t_submitted


def mean_itl(streams: list[RequestStream]) -> float:
    gaps = [
        (seq.t_last_token - seq.t_first_token) / (seq.emitted - 1)
        for seq in (stream.sequences[0] for stream in streams)
        if seq.t_first_token is not None and seq.emitted > 1
    ]
    return sum(gaps) / len(gaps)


def closed_loop_itl(concurrency: int, max_num_seqs: int = 256) -> float:
    async def scenario() -> float:
        eng = engine(max_num_seqs, tokens=64)
        streams = [eng.submit(request(128)) for _ in range(concurrency)]
        await asyncio.gather(*(stream.wait_done() for stream in streams))
        return mean_itl(streams)

    return run_virtual(scenario())


def test_itl_rises_with_concurrency_and_plateaus_at_the_batch_cap() -> None:
    itl = {n: closed_loop_itl(n, max_num_seqs=64) for n in (1, 8, 64, 128)}
    assert itl[1] < itl[8] < itl[64]
    # Past the cap the batch stops growing: the extra requests wait, the pace does not change.
    assert abs(itl[128] - itl[64]) / itl[64] < 0.05, itl


def test_past_saturation_the_queue_and_ttft_grow() -> None:
    async def scenario() -> tuple[list[float], int]:
        eng = engine(max_num_seqs=32, tokens=64)
        streams, waiting = [], 0
        for _ in range(300):  # 100 requests/s: several times what 32 slots can serve
            streams.append(eng.submit(request(256)))
            waiting = max(waiting, eng.num_waiting)
            await asyncio.sleep(0.01)
        await asyncio.gather(*(stream.wait_done() for stream in streams))
        return [ttft(stream) for stream in streams], waiting

    ttfts, waiting = run_virtual(scenario())
    assert waiting > 50
    first, last = sum(ttfts[:30]) / 30, sum(ttfts[-30:]) / 30
    assert last > 10 * first, (first, last)


def test_below_saturation_ttft_stays_flat() -> None:
    async def scenario() -> list[float]:
        eng = engine(max_num_seqs=256, tokens=64)
        streams = []
        for _ in range(200):  # 20 requests/s: far below what the batch can serve
            streams.append(eng.submit(request(256)))
            await asyncio.sleep(0.05)
        await asyncio.gather(*(stream.wait_done() for stream in streams))
        return [ttft(stream) for stream in streams]

    ttfts = run_virtual(scenario())
    assert max(ttfts[-50:]) < 2 * max(ttfts[:50])


def test_doubling_the_decode_batch_raises_the_step_as_the_model_says() -> None:
    model = roofline()

    def decode_step(batch: int) -> float:
        load = StepLoad()
        for _ in range(batch):
            load.add_decode(2048)
        return model.step_seconds(load)

    # Memory-bound: the weights are read once per step whatever the batch, each sequence's
    # KV once per step, so doubling the batch adds the KV time, never doubles the step.
    for batch in (8, 32, 128):
        small, large = decode_step(batch), decode_step(2 * batch)
        assert small < large < 2 * small
    assert closed_loop_itl(32) < closed_loop_itl(64)
