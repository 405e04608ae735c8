"""8. Fidelity of the step engine: simulated times against measured vLLM figures.

- Per-step times of Llama-3.1-8B (bf16, TP1) on an RTX PRO 6000 Blackwell under vLLM 0.28
  (LLMServingSim's published profile): decode batches 1-128 at 1k-8k context and a 1k-token
  prefill, against the roofline model's step time.
- vLLM's CI latency benchmark (batch 8, 32 input and 128 output tokens, the whole batch's
  time) on H100 and H200 for Llama-3.1-8B TP1, Llama-3-70B TP4 and Mixtral-8x7B TP2, run
  through the step engine itself on a virtual clock.
- The step loop's own cost at 1,000 running sequences, against the step time it simulates.

Nothing here starts a server or waits in real time: the engine runs on a virtual clock.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from itertools import count

from bench import report
from bench.options import Options
from bench.report import BenchReport, Figure
from tests.support.virtual_time import LoopClockScheduler, run_virtual, virtual_now
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.core import EngineLimits
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.steps import StepEngine
from vllm_sim.engine.tokenizer import SimulatedTokenizer
from vllm_sim.perf import RooflineModel, StepLoad, gpu_spec, preset_for

NAME = "fidelity"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True, slots=True)
class StepPoint:
    label: str
    decode_batch: int
    context: int
    prefill: int
    measured_ms: float


# LLMServingSim's step.csv for Llama-3.1-8B bf16 TP1 on the RTX PRO 6000 (vLLM 0.28).
RTX_PRO_STEPS = (
    StepPoint("decode B=1 ctx 1k", 1, 1024, 0, 12.8),
    StepPoint("decode B=32 ctx 1k", 32, 1024, 0, 18.6),
    StepPoint("decode B=128 ctx 1k", 128, 1024, 0, 34.8),
    StepPoint("decode B=64 ctx 8k", 64, 8192, 0, 89.6),
    StepPoint("prefill 1k", 0, 0, 1024, 47.9),
)


@dataclass(frozen=True, slots=True)
class LatencyRun:
    model: str
    tensor_parallel: int
    gpu: str
    measured_ms: float


# vLLM's CI latency test (buildkite performance benchmark): 8 prompts of 32 tokens, 128
# tokens out each, end to end.
CI_LATENCY = (
    LatencyRun(LLAMA_8B, 1, "H100", 997.5),
    LatencyRun(LLAMA_8B, 1, "H200", 833.4),
    LatencyRun("meta-llama/Llama-3.1-70B-Instruct", 4, "H100", 2444.5),
    LatencyRun("meta-llama/Llama-3.1-70B-Instruct", 4, "H200", 2077.5),
    LatencyRun("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, "H100", 2327.0),
    LatencyRun("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, "H200", 1917.4),
)


def step_point_ms(model: RooflineModel, point: StepPoint) -> float:
    load = StepLoad()
    if point.prefill:
        load.add_prefill(0, point.prefill, True)
    for _ in range(point.decode_batch):
        load.add_decode(point.context)
    return model.step_seconds(load) * 1000


class ExactLength(ContentSource):
    """Every sequence says exactly `tokens` tokens (a benchmark's ignore_eos)."""

    def __init__(self, tokens: int) -> None:
        super().__init__("random", SimulatedTokenizer(), random.Random(0))
        self.tokens = tokens

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        seq.output_ids = [1] * self.tokens
        seq.output_pieces = ["x"] * self.tokens
        seq.finish_reason = Finish.LENGTH


def engine_for(model: RooflineModel, tokens: int, max_num_seqs: int) -> StepEngine:
    return StepEngine(
        EngineLimits(max_num_seqs, 100_000, 100_000),
        LatencySettings(max_num_seqs=max_num_seqs),
        ExactLength(tokens),
        random.Random(0),
        model,
        16384,  # vLLM's offline (LLM class) budget on these GPUs
        scheduler=LoopClockScheduler(),
    )


_prompt_ids = count(1000)


def batch_request(prompt_tokens: int) -> GenerationRequest:
    ids = [next(_prompt_ids) for _ in range(prompt_tokens)]  # no shared prefix
    return GenerationRequest(f"bench-{ids[0]}", "m", [Prompt(ids)])


async def run_batch(engine: StepEngine, batch: int, prompt_tokens: int) -> float:
    """Submits `batch` requests together; the virtual seconds until the last one ends."""
    start = virtual_now()
    streams = [engine.submit(batch_request(prompt_tokens)) for _ in range(batch)]
    await asyncio.gather(*(stream.wait_done() for stream in streams))
    return virtual_now() - start


def ci_latency_ms(run: LatencyRun) -> float:
    shape = preset_for(run.model)
    assert shape is not None, run.model
    model = RooflineModel(shape, gpu_spec(run.gpu), tensor_parallel=run.tensor_parallel)
    engine = engine_for(model, tokens=128, max_num_seqs=256)
    return run_virtual(run_batch(engine, 8, 32)) * 1000


def loop_cost(sequences: int, tokens: int) -> tuple[float, float, int]:
    """(real seconds of CPU per step, simulated seconds per step, steps) with `sequences`
    decoding together."""
    shape = preset_for(LLAMA_8B)
    assert shape is not None
    engine = engine_for(RooflineModel(shape, gpu_spec("H100")), tokens, sequences)
    started = time.process_time()
    simulated = run_virtual(run_batch(engine, sequences, 64))
    spent = time.process_time() - started
    return spent / engine.steps, simulated / engine.steps, engine.steps


def run(opts: Options) -> BenchReport:
    rep = BenchReport(NAME, "8. Fidelity: simulated against measured vLLM times")
    shape = preset_for(LLAMA_8B)
    assert shape is not None
    rtx = RooflineModel(shape, gpu_spec("RTX-PRO-6000"))
    for point in RTX_PRO_STEPS:
        rep.figures.append(
            Figure(NAME, f"step {point.label} ms", step_point_ms(rtx, point),
                   point.measured_ms, higher_is_better=False)  # fmt: skip
        )
    for latency in CI_LATENCY:
        label = f"CI latency {latency.model.split('/')[-1]} TP{latency.tensor_parallel}"
        rep.figures.append(
            Figure(NAME, f"{label} {latency.gpu} ms", ci_latency_ms(latency),
                   latency.measured_ms, higher_is_better=False)  # fmt: skip
        )
    per_step, simulated, steps = loop_cost(1000, 40 if opts.quick else 200)
    rep.figures.append(
        Figure(NAME, "step loop CPU per step, 1000 seqs (ms)", per_step * 1000,
               simulated * 1000, higher_is_better=False)  # fmt: skip
    )
    rep.problems += [] if steps else ["the step loop ran no step"]
    return rep


def show(rep: BenchReport) -> None:
    rows = [
        [f.metric, f"{f.sim:.1f}", f"{f.base:.1f}", f"{(f.sim / f.base - 1):+.1%}"]
        for f in rep.figures
    ]
    print(report.table(["figure", "simulated", "measured", "error"], rows))
    print("  (the last line: the loop's own CPU per step against the simulated step time)")
