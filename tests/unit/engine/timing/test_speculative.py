"""Speculative decoding in virtual time: each decode step verifies k drafts and makes the
accepted ones plus one token, under the step loop and under the token clock.

The step model is linear in every token a step computes, verified drafts included (10 ms
a step, 0.1 ms a token), so each step's length is a sum the test can write down.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, run_virtual, virtual_now
from tests.unit.engine.test_core import request, run
from tests.unit.engine.timing.test_steps import token_times
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.timing.speculative import (
    Speculation,
    SpeculativeStepLoop,
    SpeculativeTokenClock,
)
from vllm_sim.engine.timing.steps import StepLoop
from vllm_sim.perf import StepLoad, expected_tokens_per_step

STEP = 0.010
PER_TOKEN = 0.0001
K = 3
T = TypeVar("T")


def run_returning(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return run_virtual(asyncio.wait_for(scenario(), timeout=20))


class CountingModel:
    """10 ms a step and 0.1 ms per token computed: prefill, decode and verified draft."""

    def __init__(self) -> None:
        self.loads: list[StepLoad] = []

    def admission_delay(self, prompt_tokens: int) -> float:
        return 0.0

    def step_seconds(self, load: StepLoad) -> float:
        self.loads.append(load)
        return STEP + PER_TOKEN * (load.prefill_tokens + load.decode_seqs + load.draft_tokens)


@dataclass
class Recorded(EngineObserver):
    """What the engine reported: each verification, each ITL observation, each step."""

    drafts: list[tuple[int, int]] = field(default_factory=list)
    gaps: list[tuple[float, int]] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)

    def drafts_verified(self, seq: Sequence, drafts: int, accepted: int) -> None:
        self.drafts.append((drafts, accepted))

    def inter_tokens(self, seq: Sequence, delay: float, count: int) -> None:
        self.gaps.append((delay, count))

    def engine_step(self, tokens: int) -> None:
        self.steps.append(tokens)


def engine(
    tokens: int,
    rate: float | None,
    *,
    budget: int = 2048,
    max_model_len: int = 100_000,
    seed: int = 7,
    itl_ms: int | None = None,
    blocks: int = 0,
) -> tuple[Engine, CountingModel, Recorded]:
    """One engine answering `tokens` tokens: the step loop (the token clock given
    `itl_ms`), decoding speculatively with k = 3 at `rate` (None: not at all)."""
    model, observer = CountingModel(), Recorded()
    spec = None if rate is None else Speculation(K, rate, random.Random(seed))
    if itl_ms is not None:
        assert spec is not None
        timing: StepLoop | SpeculativeTokenClock = SpeculativeTokenClock(spec)
    elif spec is None:
        timing = StepLoop(model, budget)
    else:
        timing = SpeculativeStepLoop(model, budget, spec)
    kv = KvCacheManager(BlockCache(blocks, 4), "", 0.0, prefix_caching=True) if blocks else None
    latency = LatencySettings(itl=(itl_ms or 0) * 1_000_000, max_num_seqs=8)
    built = Engine(
        EngineLimits(8, 1000, max_model_len, block_size=4),
        latency,
        FixedContent(tokens),
        random.Random(1),
        scheduler=LoopClockScheduler(),
        observer=observer,
        kv=kv,
        timing=timing,
    )
    return built, model, observer


def groups(times: list[float]) -> list[int]:
    """How many tokens arrived at each distinct time, in order."""
    sizes: list[int] = []
    for i, time in enumerate(times):
        if i and time == times[i - 1]:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


# ----------------------------------------------------------------- the draws


def test_acceptance_is_a_chain_with_the_expected_length() -> None:
    """Over many draws the accepted count has mean a + a^2 + a^3, and position i is
    accepted a^(i+1) of the time."""
    speculation = Speculation(K, 0.7, random.Random(3))
    draws = [speculation.accepted(K) for _ in range(40_000)]
    assert statistics.fmean(draws) + 1 == pytest.approx(expected_tokens_per_step(0.7, K), abs=0.02)
    assert expected_tokens_per_step(0.7, K) == pytest.approx(2.533, abs=1e-3)
    for position in range(K):
        share = sum(1 for d in draws if d > position) / len(draws)
        assert share == pytest.approx(0.7 ** (position + 1), abs=0.01)


def test_acceptance_zero_and_one_need_no_draw() -> None:
    rng = random.Random(3)
    state = rng.getstate()
    assert [Speculation(K, 0.0, rng).accepted(K) for _ in range(5)] == [0] * 5
    assert [Speculation(K, 1.0, rng).accepted(K) for _ in range(5)] == [K] * 5
    assert Speculation(K, 0.7, rng).accepted(0) == 0
    assert rng.getstate() == state


# ----------------------------------------------------------------- the step loop


def test_at_acceptance_0_7_a_step_makes_2_53_tokens_on_average() -> None:
    """4,000 tokens at a = 0.7, k = 3: about 1,580 decode steps, each making the accepted
    drafts plus one; their mean is (1 - a^4) / (1 - a) = 2.533."""

    async def scenario() -> None:
        built, _, observer = engine(4000, 0.7)
        stream = built.submit(request(prompt_tokens=10))
        await stream.wait_done()
        assert stream.sequences[0].emitted == 4000
        made = [accepted + 1 for _, accepted in observer.drafts]
        assert all(drafts == K for drafts, _ in observer.drafts)
        assert len(made) > 1000
        assert statistics.fmean(made) == pytest.approx(2.533, abs=0.08)
        # Every token but the prefill's came from a verification (the last one cut).
        assert 1 + sum(made) - 4000 in range(K + 1)

    run(scenario)


def test_the_inter_token_latency_falls_as_the_model_says() -> None:
    """Alone, a decode step takes 10 ms + 0.1 ms a token: 10.1 ms for one token, 10.4 ms
    for the token and its 3 drafts, which then makes 2.53 tokens: the mean gap between
    tokens falls from 10.1 ms to about 10.4 / 2.53 = 4.1 ms."""

    async def scenario() -> tuple[float, float]:
        plain, _, _ = engine(1000, None)
        spec, model, observer = engine(1000, 0.7)
        times_plain = await token_times(plain.submit(request(prompt_tokens=10)))
        times_spec = await token_times(spec.submit(request(prompt_tokens=10)))
        decode_plain = times_plain[-1] - times_plain[0]
        decode_spec = times_spec[-1] - times_spec[0]
        steps = len(observer.drafts)
        assert decode_plain == pytest.approx(999 * (STEP + PER_TOKEN))
        assert decode_spec == pytest.approx(steps * (STEP + PER_TOKEN * (1 + K)))
        assert all(load.draft_tokens == K for load in model.loads[1:])
        return decode_plain / 999, decode_spec / 999

    plain_itl, spec_itl = run_returning(scenario)
    assert plain_itl == pytest.approx(0.0101)
    assert spec_itl == pytest.approx(0.0104 / expected_tokens_per_step(0.7, K), rel=0.04)


def test_acceptance_zero_makes_one_token_per_step_at_the_verification_cost() -> None:
    async def scenario() -> None:
        built, _, observer = engine(6, 0.0)
        times = await token_times(built.submit(request(prompt_tokens=10)))
        first = STEP + PER_TOKEN * 10
        verify = STEP + PER_TOKEN * (1 + K)
        assert times == pytest.approx([first + i * verify for i in range(6)])
        assert observer.drafts == [(K, 0)] * 5
        assert [count for _, count in observer.gaps] == [1] * 5  # one ITL per step
        assert [gap for gap, _ in observer.gaps] == pytest.approx([verify] * 5)

    run(scenario)


def test_acceptance_one_makes_k_plus_one_tokens_per_step() -> None:
    """9 tokens: the prefill's, then two steps of 4 (every draft and one more)."""

    async def scenario() -> None:
        built, _, observer = engine(9, 1.0)
        times = await token_times(built.submit(request(prompt_tokens=10)))
        assert groups(times) == [1, 4, 4]
        first = STEP + PER_TOKEN * 10
        verify = STEP + PER_TOKEN * (1 + K)
        assert sorted(set(times)) == pytest.approx([first, first + verify, first + 2 * verify])
        assert observer.drafts == [(K, K), (K, K)]
        assert len(observer.gaps) == 2  # one observation per step, not per token
        assert observer.steps == [10, 4, 4]  # the prompt, then the tokens each step made

    run(scenario)


def test_the_output_ends_at_its_length_and_drafts_past_it_are_thrown_away() -> None:
    """6 tokens at acceptance 1: the prefill's, 4, then 1 of the 4 the last step makes;
    the 3 accepted drafts past the end still count as verified and accepted, as vLLM
    counts them."""

    async def scenario() -> None:
        built, _, observer = engine(6, 1.0)
        stream = built.submit(request(prompt_tokens=10, max_tokens=6))
        times = await token_times(stream)
        assert groups(times) == [1, 4, 1]
        assert stream.sequences[0].emitted == len(stream.sequences[0].output_ids) == 6
        assert observer.drafts == [(K, K), (K, K)]
        seq = stream.sequences[0]
        assert (seq.spec_draft_tokens, seq.spec_accepted_tokens) == (6, 6)

    run(scenario)


def test_drafts_take_what_the_token_budget_leaves() -> None:
    """A budget of 2 tokens a step: the decode token and one draft."""

    async def scenario() -> None:
        built, model, observer = engine(5, 1.0, budget=2)
        times = await token_times(built.submit(request(prompt_tokens=2)))
        assert groups(times) == [1, 2, 2]
        assert observer.drafts == [(1, 1), (1, 1)]
        assert [load.draft_tokens for load in model.loads] == [0, 1, 1]

    run(scenario)


def test_no_draft_reaches_past_the_context() -> None:
    """max_model_len 17 with a 10-token prompt and 7 output tokens: after 5 tokens the
    context has room for one draft (vLLM schedules no position past max_model_len - 1)."""

    async def scenario() -> None:
        built, _, observer = engine(7, 1.0, max_model_len=17)
        times = await token_times(built.submit(request(prompt_tokens=10)))
        assert groups(times) == [1, 4, 2]
        assert observer.drafts == [(K, K), (1, 1)]

    run(scenario)


def test_a_verification_attends_to_the_context_of_each_draft() -> None:
    """The decode token at context c and drafts at c + 1 .. c + 3."""

    async def scenario() -> None:
        built, model, _ = engine(3, 0.0)
        await token_times(built.submit(request(prompt_tokens=10)))
        second = model.loads[1]
        assert (second.decode_seqs, second.decode_context) == (1, 11)
        assert (second.draft_tokens, second.draft_context) == (K, 12 + 13 + 14)

    run(scenario)


def test_drafts_hold_kv_blocks_and_the_answer_completes() -> None:
    """A small cache of 4-token blocks: a decode with drafts takes the blocks for them."""

    async def scenario() -> None:
        built, _, observer = engine(40, 0.7, blocks=64)
        stream = built.submit(request(prompt_tokens=10))
        await stream.wait_done()
        assert stream.sequences[0].emitted == 40
        assert observer.drafts
        kv = built.kv
        assert kv is not None and kv.cache.held_blocks == 0

    run(scenario)


def test_a_seeded_run_is_reproduced() -> None:
    async def scenario() -> list[list[float]]:
        runs = []
        for _ in range(2):
            built, _, _ = engine(300, 0.6, seed=11)
            times = await token_times(built.submit(request(prompt_tokens=10)))
            runs.append([time - times[0] for time in times])
        return runs

    first, second = run_returning(scenario)
    assert groups(first) == groups(second)  # the same draws
    assert first == pytest.approx(second)
    assert max(groups(first)) > 1


# ----------------------------------------------------------------- the token clock


def test_the_token_clock_makes_a_burst_per_inter_token_latency() -> None:
    """ITL 10 ms, acceptance 1: the first token at once, then 4 tokens every 10 ms."""

    async def scenario() -> None:
        built, _, observer = engine(9, 1.0, itl_ms=10)
        start = virtual_now()
        times = await token_times(built.submit(request(prompt_tokens=10)))
        assert groups(times) == [1, 4, 4]
        assert sorted(set(times)) == pytest.approx([start, start + 0.01, start + 0.02])
        assert observer.drafts == [(K, K), (K, K)]
        assert len(observer.gaps) == 2

    run(scenario)


def test_the_token_clock_at_acceptance_0_7() -> None:
    async def scenario() -> None:
        built, _, observer = engine(3000, 0.7, itl_ms=10)
        times = await token_times(built.submit(request(prompt_tokens=10)))
        steps = len(observer.drafts)
        assert 3000 / steps == pytest.approx(2.533, abs=0.1)
        assert times[-1] - times[0] == pytest.approx(steps * 0.010)

    run(scenario)


def test_the_token_clock_without_delay_still_counts_its_steps() -> None:
    """ITL 0: the whole answer at once, its steps still drawn and observed."""

    async def scenario() -> None:
        built, _, observer = engine(9, 1.0, itl_ms=0)
        stream = built.submit(request(prompt_tokens=10))
        assert stream.done and stream.sequences[0].emitted == 9  # released as it started
        assert observer.drafts == [(K, K), (K, K)]
        assert observer.gaps == [(0.0, 1), (0.0, 1)]

    run(scenario)
