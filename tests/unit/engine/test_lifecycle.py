"""The engine's lifecycle in virtual time: pausing it (vLLM's /pause modes), putting it to
sleep and waking it, and stopping what is in flight."""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.support.virtual_time import LoopClockScheduler
from tests.unit.engine.test_core import MS, make_engine, request, run
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.toolcalls import ToolCallOutput
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.events import AllBlocksCleared, KvEvent
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.lifecycle import Asleep, PauseMode
from vllm_sim.engine.sequence import RequestStream, SeqState, Sequence
from vllm_sim.engine.tokenizer import SimulatedTokenizer


def pause_of(engine: Engine) -> PauseMode | None:
    """The engine's pause state, read anew (not narrowed by an earlier assert)."""
    return engine.paused


async def until(stream: RequestStream, emitted: int) -> None:
    while stream.sequences[0].emitted < emitted:
        await stream.notification()


def test_keep_freezes_running_requests_until_resume() -> None:
    async def scenario() -> None:
        engine = make_engine(tokens=5, ttft_ms=10, itl_ms=10)
        stream = engine.submit(request())
        await asyncio.sleep(0.025)  # tokens at 10 and 20 ms
        seq = stream.sequences[0]
        assert seq.emitted == 2
        engine.pause("keep")
        assert pause_of(engine) == "keep"
        await asyncio.sleep(0.1)
        assert seq.emitted == 2 and not stream.done  # no token while frozen
        engine.resume()
        assert pause_of(engine) is None
        await stream.wait_done()
        # The remaining three tokens came 10 ms apart after the 100 ms pause.
        assert seq.t_finished is not None
        assert abs(seq.t_finished - 0.150) < 1e-6
        assert seq.finish_reason == Finish.LENGTH and len(seq.output_ids) == 5

    run(scenario)


def test_paused_engine_queues_new_requests_and_resume_starts_them() -> None:
    async def scenario() -> None:
        engine = make_engine(tokens=2, itl_ms=10, max_num_seqs=4)
        engine.pause("wait")
        stream = engine.submit(request())
        await asyncio.sleep(0.1)
        assert engine.num_running == 0 and engine.num_waiting == 1
        assert stream.sequences[0].state is SeqState.WAITING
        engine.resume()
        await stream.wait_done()
        assert stream.sequences[0].finished and engine.open_requests == 0

    run(scenario)


def test_wait_lets_running_requests_finish_but_starts_none() -> None:
    async def scenario() -> None:
        engine = make_engine(tokens=3, itl_ms=10, max_num_seqs=1)
        first, second = engine.submit(request()), engine.submit(request())
        await asyncio.sleep(0.005)
        engine.pause("wait")
        await first.wait_done()
        assert first.sequences[0].finish_reason == Finish.LENGTH
        await asyncio.sleep(0.1)
        assert engine.num_running == 0 and second.sequences[0].state is SeqState.WAITING
        engine.resume()
        await second.wait_done()

    run(scenario)


def test_abort_ends_everything_in_flight_with_what_was_released() -> None:
    async def scenario() -> None:
        engine = make_engine(tokens=10, itl_ms=10, max_num_seqs=1)
        running, queued = engine.submit(request()), engine.submit(request(n=2))
        await until(running, 4)
        engine.pause("abort")
        for stream in (running, queued):
            assert stream.done and stream.error is None
            for seq in stream.sequences:
                assert seq.finished and seq.finish_reason == Finish.ABORT
                assert len(seq.output_ids) == len(seq.output_pieces) == seq.emitted
        assert running.sequences[0].emitted == 4
        assert all(seq.emitted == 0 for seq in queued.sequences)
        assert engine.num_running == 0 and engine.num_waiting == 0
        assert engine.paused == "abort"
        later = engine.submit(request())  # queued while paused
        await asyncio.sleep(0.05)
        assert later.sequences[0].state is SeqState.WAITING
        engine.resume()
        await later.wait_done()
        assert later.sequences[0].finish_reason == Finish.LENGTH

    run(scenario)


def test_abort_after_keep_thaws_nothing_and_ends_the_frozen() -> None:
    async def scenario() -> None:
        engine = make_engine(tokens=5, itl_ms=10)
        stream = engine.submit(request())
        await until(stream, 2)
        engine.pause("keep")
        engine.pause("abort")
        assert stream.done and stream.sequences[0].finish_reason == Finish.ABORT
        engine.resume()
        await asyncio.sleep(0.1)  # the thawed clock finds nothing of it to release
        assert stream.sequences[0].emitted == 2

    run(scenario)


class ToolContent(ContentSource):
    """Two tool calls of three tokens each."""

    def __init__(self) -> None:
        super().__init__("random", SimulatedTokenizer(), random.Random(0))

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        seq.output_ids = list(range(6))
        seq.output_pieces = [f"a{i}" for i in range(6)]
        seq.tool_calls = [
            ToolCallOutput("0000000001", "f", "{}", 0, 3),
            ToolCallOutput("0000000002", "g", "{}", 3, 6),
        ]
        seq.call_starts = frozenset({3})
        seq.finish_reason = Finish.TOOL_CALLS


def test_abort_drops_a_tool_call_not_released_whole() -> None:
    async def scenario() -> None:
        engine = Engine(
            EngineLimits(1, 10, 1024),
            LatencySettings(itl=10 * MS, max_num_seqs=1),
            ToolContent(),
            random.Random(1),
            scheduler=LoopClockScheduler(),
        )
        stream = engine.submit(request())
        await until(stream, 5)
        engine.pause("abort")
        seq = stream.sequences[0]
        assert seq.tool_calls is not None and [c.name for c in seq.tool_calls] == ["f"]
        assert seq.output_pieces == ["a0", "a1", "a2"] and seq.emitted == 3

    run(scenario)


def _cached_engine(events: list[KvEvent]) -> Engine:
    cache = BlockCache(64, 4, events.append)
    cache.loaded_models.add("m")
    return make_engine(tokens=3, max_num_seqs=2, kv=KvCacheManager(cache, "", 0.0))


def cache_off(engine: Engine) -> bool:
    """Whether the prefix cache is off, read anew."""
    assert engine.kv is not None
    return engine.kv.cache.disabled


def test_sleep_clears_the_prefix_cache_and_refuses_until_woken() -> None:
    async def scenario() -> None:
        events: list[KvEvent] = []
        engine = _cached_engine(events)
        assert engine.kv is not None
        await engine.submit(request(prompt_tokens=8)).wait_done()
        assert engine.kv.cache.unused
        engine.sleep(2)
        assert engine.view.asleep == frozenset(Asleep) and engine.view.sleep_level == 2
        assert isinstance(events[-1], AllBlocksCleared) and not engine.kv.cache.unused
        with pytest.raises(EngineError) as refused:
            engine.submit(request())
        assert refused.value.refusal is Refusal.SLEEPING
        engine.wake(frozenset({Asleep.WEIGHTS}))
        assert engine.view.asleep == {Asleep.KV_CACHE} and cache_off(engine)
        engine.wake(frozenset({Asleep.KV_CACHE}))
        assert not engine.view.asleep and engine.view.sleep_level == 0
        assert not cache_off(engine)
        await engine.submit(request(prompt_tokens=8)).wait_done()
        assert engine.kv.cache.unused  # cached again

    run(scenario)


def test_stop_all_fails_every_request_in_flight() -> None:
    async def scenario() -> None:
        engine = make_engine(tokens=5, itl_ms=10, max_num_seqs=1)
        running, queued = engine.submit(request()), engine.submit(request(n=2))
        assert engine.view.open_requests == 3
        assert engine.stop_all("shutting down") == 2
        for stream in (running, queued):
            assert stream.done and isinstance(stream.error, EngineError)
            assert stream.error.refusal is Refusal.STOPPING
            assert str(stream.error) == "shutting down"
        assert engine.view.open_requests == 0
        assert engine.stop_all("again") == 0

    run(scenario)
