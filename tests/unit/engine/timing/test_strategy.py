"""The timing strategy's interface: which hook the scheduler core calls at which event,
seen through a strategy that records each call before the token clock acts on it."""

from __future__ import annotations

import asyncio

from tests.unit.engine.test_core import make_engine, request, run
from tests.unit.engine.test_core_kv import own
from vllm_sim.engine.core import Engine
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.timing.steps import StepLoop
from vllm_sim.engine.timing.strategy import SchedulerCore, TimingStrategy
from vllm_sim.engine.timing.token_clock import TokenClock
from vllm_sim.perf import StepLoad

Call = tuple[object, ...]


class Recording:
    """A TimingStrategy that records every hook called, then lets the token clock act."""

    def __init__(self) -> None:
        self.clock = TokenClock()
        self.calls: list[Call] = []

    def attach(self, core: SchedulerCore) -> None:
        self.calls.append(("attach",))
        self.clock.attach(core)

    def kick(self) -> None:
        self.calls.append(("kick",))
        self.clock.kick()

    def prefill(self, seq: Sequence, now: float) -> None:
        self.calls.append(("prefill", seq.uid))
        self.clock.prefill(seq, now)

    def recompute(self, seq: Sequence, computed: int, cached: int, now: float) -> None:
        self.calls.append(("recompute", seq.uid, computed))
        self.clock.recompute(seq, computed, cached, now)

    def preempted(self, seq: Sequence) -> None:
        self.calls.append(("preempted", seq.uid))
        self.clock.preempted(seq)

    def freeze(self) -> None:
        self.calls.append(("freeze",))
        self.clock.freeze()

    def thaw(self) -> None:
        self.calls.append(("thaw",))
        self.clock.thaw()


def recorded(engine: Engine) -> Recording:
    timing = engine.timing
    assert isinstance(timing, Recording)
    return timing


def engine_with(
    recording: Recording, *, tokens: int = 3, blocks: int = 0, max_num_seqs: int = 2
) -> Engine:
    kv = KvCacheManager(BlockCache(blocks, 4), "", 0.0) if blocks else None
    return make_engine(tokens=tokens, itl_ms=10, max_num_seqs=max_num_seqs, kv=kv, timing=recording)


class FlatSteps:
    def admission_delay(self, prompt_tokens: int) -> float:
        return 0.0

    def step_seconds(self, load: StepLoad) -> float:
        return 0.01


def test_both_timings_are_strategies_and_the_engine_is_their_core() -> None:
    """The type checker holds these: each assignment checks only if the interface is met."""
    strategies: list[TimingStrategy] = [TokenClock(), StepLoop(FlatSteps(), 2048)]
    core: SchedulerCore = make_engine()
    assert len(strategies) == 2 and not core.running


def test_the_engine_attaches_its_timing_once_and_kicks_it_at_each_submit() -> None:
    async def scenario() -> None:
        engine = engine_with(Recording())
        calls = recorded(engine).calls
        assert calls == [("attach",)]
        stream = engine.submit(request())
        uid = stream.sequences[0].uid
        assert calls[1:] == [("kick",), ("prefill", uid)]
        await stream.wait_done()
        assert calls[-1] == ("kick",)  # its end freed a slot

    run(scenario)


def test_a_preempted_sequence_is_recomputed_from_what_it_had() -> None:
    async def scenario() -> None:
        # Two sequences of 4 + 11 tokens of KV need 4 blocks each; the cache holds 6.
        engine = engine_with(Recording(), tokens=12, blocks=6, max_num_seqs=4)
        older = engine.submit(own(4))
        await asyncio.sleep(0.001)
        newer = engine.submit(own(4))
        await asyncio.gather(older.wait_done(), newer.wait_done())
        uid = newer.sequences[0].uid
        mine = [call for call in recorded(engine).calls if call[1:2] == (uid,)]
        assert mine[0] == ("prefill", uid)
        assert mine[1] == ("preempted", uid)
        assert mine[2][:2] == ("recompute", uid)
        computed = mine[2][2]
        assert isinstance(computed, int) and computed > 4  # its prompt and some output

    run(scenario)


def test_pause_freezes_and_resume_thaws_then_kicks() -> None:
    async def scenario() -> None:
        engine = engine_with(Recording())
        calls = recorded(engine).calls
        engine.pause("keep")
        assert calls[-1] == ("freeze",)
        engine.pause("wait")
        assert calls[-1] == ("thaw",)  # a kept pause lets its requests run on
        engine.resume()
        assert calls[-2:] == [("thaw",), ("kick",)]

    run(scenario)
