"""--max-request-output-tokens in the engine: a request whose worst case is over the limit is
refused before admission, one that makes more than the limit fails once past it, and a
request that makes its tokens all at once is generated a slice per turn of the loop."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.unit.engine.test_core import make_engine, refusal, request, run
from vllm_sim.engine import budget
from vllm_sim.engine.core import Engine
from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.turn import WORK_PER_TURN


def limited(engine: Engine, limit: int) -> Engine:
    engine.limits = replace(engine.limits, max_request_output_tokens=limit)
    return engine


def test_worst_case_over_the_limit_is_refused_before_admission() -> None:
    engine = limited(make_engine(max_num_seqs=8), 100)
    req = request(n=3, max_tokens=10)
    req.logprobs = 3  # 3 x 10 tokens x (1 + 3) = 120
    error = refusal(engine, req, Refusal.INVALID)
    assert error.status == 400 and error.param == "max_tokens"
    assert "could make 120 output tokens" in error.message
    assert budget.FLAG in error.message
    assert engine.num_running == 0 and engine.num_waiting == 0  # nothing was taken


def test_prompts_n_tokens_and_alternatives_all_count() -> None:
    async def body() -> None:
        engine = limited(make_engine(max_num_seqs=8), 120)
        req = request(n=3, prompts=1, max_tokens=10)
        req.logprobs = 3
        engine.submit(req)  # exactly at the limit
        two_prompts = request(n=3, prompts=2, max_tokens=10)
        two_prompts.logprobs = 3
        refusal(engine, two_prompts, Refusal.INVALID)

    run(body)


def test_unset_max_tokens_counts_the_guess_or_the_room_left() -> None:
    async def body() -> None:
        engine = limited(make_engine(max_num_seqs=8, max_model_len=100_000), 2 * 1000)
        engine.submit(request(n=2))  # 2 x the 1000-token guess: at the limit
        refusal(engine, request(n=3), Refusal.INVALID)
        small_context = limited(make_engine(max_num_seqs=8, max_model_len=53), 100)
        small_context.submit(request(prompt_tokens=3, n=2))  # 2 x the 50 tokens of room left

    run(body)


def test_zero_means_no_limit() -> None:
    async def body() -> None:
        engine = limited(make_engine(max_num_seqs=8), 0)
        req = request(n=8, max_tokens=1000)
        req.logprobs = 20
        engine.submit(req)

    run(body)


def test_output_longer_than_its_guess_fails_once_past_the_limit() -> None:
    async def body() -> None:
        # The sequence makes 1500 tokens though it asked for none (as a long echo can):
        # counted as 1000 when admitted, it fails once it made more than 1200.
        engine = limited(make_engine(max_num_seqs=8, tokens=1500, max_model_len=4096), 1200)
        stream = engine.submit(request())
        await stream.wait_done()
        assert isinstance(stream.error, EngineError)
        assert stream.error.refusal is Refusal.INVALID
        assert budget.FLAG in str(stream.error)
        assert engine.num_running == 0 and engine.num_waiting == 0
        fits = limited(make_engine(max_num_seqs=8, tokens=1200, max_model_len=4096), 1200)
        stream = fits.submit(request())
        await stream.wait_done()
        assert stream.error is None

    run(body)


def test_a_large_request_is_generated_a_slice_per_turn() -> None:
    async def body() -> None:
        per_sequence = 1000
        count = 3 * WORK_PER_TURN // per_sequence
        engine = make_engine(max_num_seqs=count, tokens=per_sequence)
        stream = engine.submit(request(n=count, max_tokens=per_sequence))
        started_at_once = sum(1 for seq in stream.sequences if seq.t_started is not None)
        assert started_at_once <= WORK_PER_TURN // per_sequence + 1
        await asyncio.sleep(0)
        await stream.wait_done()
        assert stream.error is None
        assert all(seq.finished for seq in stream.sequences)

    run(body)
