"""What CPU offloading buys, replayed in simulated time under the roofline model: a
multi-turn trace whose conversations' prefixes exceed the GPU's KV cache but fit the GPU
and the CPU tier together gets a higher prefix hit rate and a lower mean TTFT with
offloading than without (the issue's acceptance); the offloaded part of the hit is loaded
back over the host link, which costs far less than the prefill it saves."""

from __future__ import annotations

import statistics

from vllm_sim.config import load_startup
from vllm_sim.engine.tokenizer import SimulatedTokenizer
from vllm_sim.whatif.results import RunResult
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import MOONCAKE_BLOCK, Trace, TraceRequest

CONVERSATIONS = 8
TURNS = 4
GPU_BLOCKS = 256  # 4,096 tokens of KV: about two conversations' history


def multi_turn() -> Trace:
    """Each conversation's turn t sends its whole history: t + 1 Mooncake blocks of 512
    tokens shared with its earlier turns. The conversations take turns, so between two
    turns of one the others push its history out of the GPU."""
    requests = []
    line = 0
    for turn in range(TURNS):
        for conversation in range(CONVERSATIONS):
            line += 1
            history = tuple(conversation * 100 + block for block in range(turn + 2))
            requests.append(
                TraceRequest(
                    line,
                    line * 0.5,  # one at a time: TTFT is the prefill's (or the load's)
                    len(history) * MOONCAKE_BLOCK,
                    8,
                    hash_ids=history,
                )
            )
    return Trace(requests)


def replay(*extra: str) -> RunResult:
    flags = [
        "--model", "meta-llama/Llama-3.1-8B-Instruct",
        "--timing-model", "roofline",
        "--num-gpu-blocks-override", str(GPU_BLOCKS),
        "--max-model-len", "4096",
        "--seed", "0",
        *extra,
    ]  # fmt: skip
    cfg = load_startup(flags, {}).config
    return Replay(cfg, multi_turn(), environ={}, tokenizer=SimulatedTokenizer()).run()


def hit_rate(result: RunResult) -> float:
    done = [r for r in result.records if r.ok]
    assert len(done) == CONVERSATIONS * TURNS
    return sum(r.cached_tokens for r in done) / sum(r.input_tokens for r in done)


def mean_ttft(result: RunResult) -> float:
    return statistics.fmean(r.ttft for r in result.records if r.ttft is not None)


def test_offloading_raises_the_hit_rate_and_lowers_ttft() -> None:
    # The prefixes: 8 conversations of up to 5 x 512 tokens, 128 KiB a token: 2.5 GiB.
    without = replay()
    with_offload = replay("--kv-offloading-size", "4")
    assert hit_rate(without) < 0.1  # the GPU keeps almost nothing between turns
    assert hit_rate(with_offload) > 0.6  # every turn after the first finds its history
    # TTFT keeps the API server's admission time (the same in both runs), so the mean
    # falls by less than the prefill does.
    assert mean_ttft(with_offload) < 0.8 * mean_ttft(without)
    for plain, offloaded in zip(without.records, with_offload.records, strict=True):
        assert plain.ttft is not None and offloaded.ttft is not None
        if offloaded.cached_tokens:  # every later turn: its prefill less the history's
            queue = offloaded.queue_time or 0.0
            assert offloaded.ttft - queue < 0.6 * (plain.ttft - queue)


def test_a_tier_too_small_for_the_prefixes_helps_less() -> None:
    small = replay("--kv-offloading-size", "0.5")
    large = replay("--kv-offloading-size", "4")
    assert hit_rate(small) < hit_rate(large)
