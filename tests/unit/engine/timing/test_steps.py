"""The step loop in virtual time: vLLM V1's schedule, one batch step at a time.

A linear step model (10 ms a step, plus 0.1 ms per prefill token and per decoding
sequence) makes every expected time a sum the test can write down.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, virtual_now
from tests.unit.engine.test_core import request, run
from tests.unit.engine.test_core_kv import own
from vllm_sim.engine.clock import TimerHandle
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.errors import RequestAborted
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import image_work
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.engine.timing.steps import StepLoop
from vllm_sim.perf import StepLoad

STEP = 0.010
PER_TOKEN = 0.0001


class LinearModel:
    """10 ms a step, 0.1 ms per prefill token and per decoding sequence; a request reaches
    the scheduler `api` seconds plus `api_per_token` per prompt token after it arrives."""

    def __init__(self, api: float = 0.0, api_per_token: float = 0.0) -> None:
        self.loads: list[StepLoad] = []
        self.api = api
        self.api_per_token = api_per_token

    def admission_delay(self, prompt_tokens: int) -> float:
        return self.api + self.api_per_token * prompt_tokens

    def step_seconds(self, load: StepLoad) -> float:
        self.loads.append(load)
        return STEP + PER_TOKEN * (load.prefill_tokens + load.decode_seqs)


class Steps(EngineObserver):
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.preempted: list[int] = []

    def engine_step(self, tokens: int) -> None:
        self.tokens.append(tokens)

    def sequence_preempted(self, seq: Sequence) -> None:
        self.preempted.append(seq.uid)


def step_engine(
    *,
    tokens: int = 5,
    max_num_seqs: int = 8,
    budget: int = 2048,
    blocks: int = 0,
    scheduler: LoopClockScheduler | None = None,
    api: float = 0.0,
) -> tuple[Engine, LinearModel, Steps]:
    model = LinearModel(api)
    observer = Steps()
    kv = KvCacheManager(BlockCache(blocks, 4), "", 0.0, prefix_caching=True) if blocks else None
    engine = Engine(
        EngineLimits(max_num_seqs, 1000, 100_000, block_size=4),
        LatencySettings(max_num_seqs=max_num_seqs),
        FixedContent(tokens),
        random.Random(1),
        scheduler=scheduler or LoopClockScheduler(),
        observer=observer,
        kv=kv,
        timing=StepLoop(model, budget),
    )
    return engine, model, observer


async def token_times(stream: RequestStream) -> list[float]:
    """When each token of the stream's first sequence was released."""
    seq, times = stream.sequences[0], []
    while not stream.done:
        await stream.wait()
        times += [virtual_now()] * (seq.emitted - seq.sent)
        seq.sent = seq.emitted
    return times


def decode_step(batch: int) -> float:
    return STEP + PER_TOKEN * batch


def test_prefill_then_one_token_per_step() -> None:
    async def scenario() -> None:
        engine, _, observer = step_engine(tokens=4)
        times = await token_times(engine.submit(request(prompt_tokens=100)))
        first = STEP + PER_TOKEN * 100  # the whole prompt in one step
        expected = [first + k * decode_step(1) for k in range(4)]
        assert times == pytest.approx(expected)
        assert observer.tokens == [100, 1, 1, 1]  # what each step computed

    run(scenario)


def test_a_long_prompt_is_prefilled_in_chunks_of_the_budget() -> None:
    async def scenario() -> None:
        engine, model, _ = step_engine(tokens=1, budget=2048)
        times = await token_times(engine.submit(request(prompt_tokens=5000)))
        chunks = [load.prefill_tokens for load in model.loads]
        assert chunks == [2048, 2048, 904]
        assert times == [pytest.approx(3 * STEP + PER_TOKEN * 5000)]
        already = [load.prefill_kv_tokens - load.prefill_tokens for load in model.loads]
        assert already == [0, 2048, 4096]  # each chunk attends to the ones before

    run(scenario)


def test_a_prompts_images_go_through_the_encoder_with_its_first_chunk() -> None:
    """Two images of 64 and 32 tokens in a 5,000-token prompt chunked by 2,048: the first
    chunk's step carries both to the vision encoder, later ones none; audio is not the
    vision encoder's. A prompt whose image a prefix hit covers encodes nothing
    (image_work)."""
    features: dict[str, dict[str, Any]] = {
        "mm_hashes": {"image": ["a", "b"], "audio": ["c"]},
        "mm_placeholders": {
            "image": [{"offset": 10, "length": 64}, {"offset": 3000, "length": 32}],
            "audio": [{"offset": 200, "length": 50}],
        },
    }

    async def scenario() -> None:
        engine, model, _ = step_engine(tokens=1, budget=2048)
        req = request(prompt_tokens=5000)
        req.prompts[0].features = features
        await token_times(engine.submit(req))
        work = [(load.encoder_tokens, load.encoder_pairs) for load in model.loads]
        assert work == [(96, 64.0**2 + 32.0**2), (0, 0.0), (0, 0.0)]

    run(scenario)
    assert image_work(features, 74) == (32, 32.0**2)  # the first image is cached
    assert image_work(None, 0) == (0, 0.0)


def test_requests_arriving_together_share_every_step() -> None:
    async def scenario() -> None:
        engine, model, _ = step_engine(tokens=3)
        streams = [engine.submit(request(prompt_tokens=10)) for _ in range(4)]
        times = await asyncio.gather(*(token_times(stream) for stream in streams))
        assert all(t == times[0] for t in times)
        assert times[0][1] - times[0][0] == pytest.approx(decode_step(4))
        assert model.loads[1].decode_seqs == 4

    run(scenario)


def test_a_request_arriving_mid_step_waits_for_the_next_step() -> None:
    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=3)
        first = engine.submit(request(prompt_tokens=100))  # a 20 ms step
        await engine_sleep(0.005)
        late = engine.submit(request(prompt_tokens=10))
        times = await token_times(late)
        step_one = STEP + PER_TOKEN * 100
        # It joins at 20 ms: its prefill and the first request's decode share that step.
        assert times[0] == pytest.approx(step_one + STEP + PER_TOKEN * (10 + 1))
        await token_times(first)

    run(scenario)


def test_a_request_reaches_the_scheduler_after_the_api_server_time() -> None:
    """Idle engine, 8 ms in the API server: the first step starts 8 ms after arrival.
    Busy engine (a first step from 8 to 28 ms): a request arriving at 9 ms is ready at 17,
    inside that step, so it joins the next one, as it would without the delay; one
    arriving at 21 ms is ready at 29, just after the second step started at 28, so it
    waits one step more."""

    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=5, api=0.008)
        times = await token_times(engine.submit(request(prompt_tokens=100)))
        assert times[0] == pytest.approx(0.008 + STEP + PER_TOKEN * 100)

        engine, _, _ = step_engine(tokens=5, api=0.008)
        start = virtual_now()
        first = engine.submit(request(prompt_tokens=100))  # steps: 8-28 ms, 28-39.1, ...
        await engine_sleep(0.009)
        early = engine.submit(request(prompt_tokens=10))  # arrives at 9, ready at 17 ms
        await engine_sleep(0.012)
        late = engine.submit(request(prompt_tokens=10))  # arrives at 21, ready at 29 ms
        early_times, late_times, _ = await asyncio.gather(
            token_times(early), token_times(late), token_times(first)
        )
        step_one_ends = start + 0.008 + STEP + PER_TOKEN * 100
        step_two_ends = step_one_ends + STEP + PER_TOKEN * (10 + 1)
        assert early_times[0] == pytest.approx(step_two_ends)
        # The late one joins the third step (its prefill beside two decodes).
        assert late_times[0] == pytest.approx(step_two_ends + STEP + PER_TOKEN * (10 + 2))

    run(scenario)


def test_a_long_prefill_slows_the_running_streams() -> None:
    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=40, budget=2048)
        running = engine.submit(request(prompt_tokens=10))
        watch = asyncio.ensure_future(token_times(running))
        await engine_sleep(0.1)  # decoding alone by now
        engine.submit(request(prompt_tokens=6000))
        times = await watch
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) == pytest.approx(decode_step(1))
        # While the long prompt prefills, each step carries a chunk of ~2047 tokens.
        assert max(gaps) == pytest.approx(STEP + PER_TOKEN * 2048)

    run(scenario)


def test_max_num_seqs_caps_the_batch_and_the_rest_wait() -> None:
    async def scenario() -> None:
        engine, model, _ = step_engine(tokens=2, max_num_seqs=2)
        streams = [engine.submit(request(prompt_tokens=10)) for _ in range(3)]
        await engine_sleep(0.001)  # the first step starts once this turn of the loop ends
        assert engine.num_running == 2 and engine.num_waiting == 1
        assert max(load.requests for load in model.loads) <= 2
        done = await asyncio.gather(*(token_times(stream) for stream in streams))
        assert done[2][0] > done[0][-1]  # admitted in the step after a slot freed

    run(scenario)


def test_kv_exhaustion_preempts_the_newest_and_it_recomputes() -> None:
    async def scenario() -> None:
        # 12 blocks of 4 tokens; two 16-token prompts (4 blocks each) growing to 36 tokens.
        engine, _, observer = step_engine(tokens=20, blocks=12)
        streams = [engine.submit(own(16)) for _ in range(2)]
        for stream in streams:
            await token_times(stream)
        assert observer.preempted, "the cache could not hold both"
        assert all(len(s.sequences[0].output_ids) == 20 for s in streams)
        assert engine.kv is not None and engine.kv.cache.held_blocks == 0

    run(scenario)


def test_a_prefix_cache_hit_skips_its_prefill() -> None:
    async def scenario() -> None:
        engine, model, _ = step_engine(tokens=1, blocks=256)
        await token_times(engine.submit(request(prompt_tokens=400)))
        model.loads.clear()
        await token_times(engine.submit(request(prompt_tokens=400)))  # the same prompt
        # As in vLLM, the hit stops a whole block short of the last token: 396 of 400 cached,
        # the last block (of 4 tokens) computed again.
        assert model.loads[0].prefill_tokens == 4

    run(scenario)


def test_an_abort_mid_step_drops_its_work_and_frees_the_slot() -> None:
    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=50)
        aborted = engine.submit(request(prompt_tokens=10))
        other = engine.submit(request(prompt_tokens=10))
        await engine_sleep(0.05)
        emitted = aborted.sequences[0].emitted
        aborted.abort()
        assert aborted.done and isinstance(aborted.error, RequestAborted)
        assert engine.num_running == 1
        await token_times(other)
        assert other.sequences[0].emitted == 50
        assert aborted.sequences[0].emitted == emitted  # nothing more after the abort

    run(scenario)


def test_pause_keep_freezes_the_step_and_resume_finishes_it() -> None:
    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=1)
        stream = engine.submit(request(prompt_tokens=100))  # one 20 ms step
        await engine_sleep(0.005)
        engine.pause("keep")
        await engine_sleep(1.0)
        assert stream.sequences[0].emitted == 0
        engine.resume()
        times = await token_times(stream)
        assert times == [pytest.approx(1.005 + 0.015)]  # the 15 ms it had left

    run(scenario)


def test_an_idle_engine_schedules_no_step() -> None:
    async def scenario() -> None:
        engine, model, _ = step_engine(tokens=2)
        await token_times(engine.submit(request(prompt_tokens=10)))
        loop = engine.timing
        assert isinstance(loop, StepLoop)
        steps = loop.steps
        await engine_sleep(1.0)
        assert loop.steps == steps and len(model.loads) == steps

    run(scenario)


async def engine_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def test_a_pd_decode_request_waits_for_its_kv_transfer() -> None:
    async def scenario() -> None:
        model = LinearModel()
        engine = Engine(
            EngineLimits(8, 1000, 100_000, block_size=4),
            LatencySettings(max_num_seqs=8, kv_transfer=50 * 1_000_000),
            FixedContent(2),
            random.Random(1),
            scheduler=LoopClockScheduler(),
            timing=StepLoop(model, 2048),
        )
        req = request(prompt_tokens=100)
        req.do_remote_prefill = True
        times = await token_times(engine.submit(req))
        # 50 ms of transfer, then a step computing what the transfer did not bring.
        assert times[0] >= 0.050 + STEP
        assert model.loads[0].prefill_tokens < 100

    run(scenario)


class LateTimers(LoopClockScheduler):
    """Every timer fires 2 ms after its time, as on a busy event loop."""

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return super().call_at(when + 0.002, callback)


def test_late_timers_do_not_slow_the_pace() -> None:
    """Each step is timed from when the previous one was due to end, not from when its
    timer fired: lateness shows in a token's release, never accumulates into the pace."""

    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=6, scheduler=LateTimers())
        times = await token_times(engine.submit(request(prompt_tokens=100)))
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps == pytest.approx([decode_step(1)] * 5)

    run(scenario)


def test_a_request_ready_during_a_late_step_end_is_not_forgotten() -> None:
    """Timers fire 2 ms late: the first step starts at 10 ms and is due at 30, its end runs
    at 32. A request arriving at 22.5 ms reaches the scheduler at 30.5: after the due time
    the next step is timed from, before now. With no other work, the engine must still
    start a step for it rather than idle until the next arrival."""

    async def scenario() -> None:
        engine, _, _ = step_engine(tokens=1, api=0.008, scheduler=LateTimers())
        start = virtual_now()
        first = engine.submit(request(prompt_tokens=100))
        await engine_sleep(0.0225)
        late = engine.submit(request(prompt_tokens=10))
        times = await asyncio.wait_for(token_times(late), timeout=5.0)
        await token_times(first)
        assert start + 0.0305 < times[0] < start + 0.06

    run(scenario)
