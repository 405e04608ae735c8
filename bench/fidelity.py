"""8. Fidelity of the step engine: simulated times against measured vLLM figures.

- Per-step times of Llama-3.1-8B (bf16, TP1) on an RTX PRO 6000 Blackwell under vLLM 0.28
  (LLMServingSim's published profile): decode batches 1-128 at 1k-8k context and a 1k-token
  prefill, against the roofline model's step time.
- vLLM's CI latency benchmark (batch 8, 32 input and 128 output tokens, the whole batch's
  time) on H100 and H200 for Llama-3.1-8B TP1, Llama-3-70B TP4 and Mixtral-8x7B TP2, run
  through the step engine itself on a virtual clock.
- Real vLLM under a constant request rate (Llama-3.1-8B on one H100), mean TTFT and ITL.
- A trace replay past saturation: LLMServingSim's 300 ShareGPT requests at ~10 req/s on an
  RTX PRO 6000 (`bench/data/llmservingsim_rtxpro6000_llama8b.csv`, see `replay_trace`),
  each request's arrival and token counts replayed, TTFT, TPOT and latency compared.
- The step loop's own cost at 1,000 running sequences, against the step time it simulates.

Nothing here starts a server or waits in real time: the engine runs on a virtual clock.
"""

from __future__ import annotations

import asyncio
import csv
import random
import statistics
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from bench import report
from bench.options import Options
from bench.report import BenchReport, Figure
from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, run_virtual, virtual_now
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.timing.steps import StepLoop
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


def engine_for(
    model: RooflineModel,
    content: FixedContent,
    max_num_seqs: int,
    budget: int = 16384,  # vLLM's offline (LLM class) budget on these GPUs
    kv: KvCacheManager | None = None,
    kind: type[StepLoop] = StepLoop,
) -> Engine:
    """An engine on the step loop (a `kind`) and the virtual clock, `max_num_seqs` and
    `budget` tokens a step."""
    return Engine(
        EngineLimits(max_num_seqs, 100_000, 100_000),
        LatencySettings(max_num_seqs=max_num_seqs),
        content,
        random.Random(0),
        scheduler=LoopClockScheduler(),
        kv=kv,
        timing=kind(model, budget),
    )


_prompt_ids = count(1000)


def batch_request(prompt_tokens: int) -> GenerationRequest:
    ids = [next(_prompt_ids) for _ in range(prompt_tokens)]  # no shared prefix
    return GenerationRequest(f"bench-{ids[0]}", "m", [Prompt(ids)])


async def run_batch(engine: Engine, batch: int, prompt_tokens: int) -> float:
    """Submits `batch` requests together; the virtual seconds until the last one ends."""
    start = virtual_now()
    streams = [engine.submit(batch_request(prompt_tokens)) for _ in range(batch)]
    await asyncio.gather(*(stream.wait_done() for stream in streams))
    return virtual_now() - start


def ci_latency_ms(run: LatencyRun) -> float:
    shape = preset_for(run.model)
    assert shape is not None, run.model
    # vLLM of that CI build captured piecewise CUDA graphs only (full graphs of decode
    # steps became the default later): every step launches each layer's attention
    # outside the graph. With full graphs the dense runs come out 17-26% fast.
    model = RooflineModel(
        shape, gpu_spec(run.gpu), tensor_parallel=run.tensor_parallel, full_cuda_graphs=False
    )
    engine = engine_for(model, FixedContent(128), max_num_seqs=256)
    return run_virtual(run_batch(engine, 8, 32)) * 1000


@dataclass(frozen=True, slots=True)
class OpenLoopRun:
    """Real vLLM under a constant request rate, below saturation (the BLIS team's
    sim-to-real validation runs: Llama-3.1-8B TP1 on one H100, max-num-batched-tokens 2048,
    a 100-token shared system prompt, ~575 prompt and 248 output tokens)."""

    label: str
    rate: float
    ttft_ms: float
    itl_ms: float  # (E2E - TTFT) / (output tokens - 1), from the published means


OPEN_LOOP = (
    OpenLoopRun("8 req/s", 8.0, 25.23, (1892.7 - 25.23) / 247),
    OpenLoopRun("20 req/s", 20.0, 29.87, (2278.1 - 29.87) / 247),
)
SHARED_PREFIX, PROMPT_TOKENS, OUTPUT_TOKENS = 100, 575, 248


async def open_loop(engine: Engine, rate: float, seconds: float) -> tuple[float, float]:
    """(mean TTFT, mean ITL) in seconds of requests arriving every 1/rate seconds."""
    prefix = [next(_prompt_ids) for _ in range(SHARED_PREFIX)]
    streams = []
    start = virtual_now()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(start + i / rate - virtual_now(), 0.0))
        unique = [next(_prompt_ids) for _ in range(PROMPT_TOKENS - SHARED_PREFIX)]
        request = GenerationRequest(f"open-{i}", "m", [Prompt(prefix + unique)])
        streams.append(engine.submit(request))
    await asyncio.gather(*(stream.wait_done() for stream in streams))
    seqs = [stream.sequences[0] for stream in streams]
    ttfts = [seq.t_first_token - seq.t_submitted for seq in seqs if seq.t_first_token]
    itls = [
        (seq.t_last_token - seq.t_first_token) / (seq.emitted - 1)
        for seq in seqs
        if seq.t_first_token is not None and seq.emitted > 1
    ]
    return sum(ttfts) / len(ttfts), sum(itls) / len(itls)


def open_loop_ms(run: OpenLoopRun, seconds: float) -> tuple[float, float]:
    shape = preset_for(LLAMA_8B)
    assert shape is not None
    model = RooflineModel(shape, gpu_spec("H100"))
    kv = KvCacheManager(BlockCache(model.num_gpu_blocks(16, 0.9), 16), "", 0.0)
    engine = engine_for(model, FixedContent(OUTPUT_TOKENS), 1024, budget=2048, kv=kv)
    ttft, itl = run_virtual(open_loop(engine, run.rate, seconds))
    return ttft * 1000, itl * 1000


TRACE = Path(__file__).parent / "data" / "llmservingsim_rtxpro6000_llama8b.csv"


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a recorded vLLM run, its times in seconds from the run's start."""

    queued: float  # when vLLM's engine received it: TTFT and latency count from here
    input_tokens: int
    output_tokens: int
    ttft: float
    latency: float

    @property
    def tpot(self) -> float:
        return (self.latency - self.ttft) / max(self.output_tokens - 1, 1)


def load_trace(path: Path = TRACE) -> list[TraceRequest]:
    """The trace: per-request engine timestamps of vLLM serving Llama-3.1-8B (bf16, TP1,
    max_num_seqs 128, max_num_batched_tokens 2048) on an NVIDIA RTX PRO 6000 Blackwell,
    from LLMServingSim's published validation run (casys-kaist/LLMServingSim,
    bench/examples/RTXPRO6000/Llama-3.1-8B/vllm/requests.jsonl, MIT licence), made
    relative to the first request."""
    with path.open(newline="") as handle:
        return [
            TraceRequest(
                float(row["queued_s"]),
                int(row["input_tokens"]),
                int(row["output_tokens"]),
                float(row["first_token_s"]) - float(row["queued_s"]),
                float(row["last_token_s"]) - float(row["queued_s"]),
            )
            for row in csv.DictReader(handle)
        ]


@dataclass(frozen=True, slots=True)
class TraceStats:
    ttft_mean: float
    ttft_median: float
    ttft_p99: float
    tpot_mean: float
    latency_mean: float

    @classmethod
    def of(cls, ttfts: list[float], tpots: list[float], latencies: list[float]) -> TraceStats:
        p99 = statistics.quantiles(ttfts, n=100, method="inclusive")[98]
        return cls(
            statistics.fmean(ttfts),
            statistics.median(ttfts),
            p99,
            statistics.fmean(tpots),
            statistics.fmean(latencies),
        )


# LLMServingSim's vLLM configuration; its KV cache held 35,913 blocks of 16 tokens.
TRACE_MAX_NUM_SEQS, TRACE_BUDGET, TRACE_BLOCKS = 128, 2048, 35_913


class _TraceContent(FixedContent):
    """Each sequence says what its recorded request did: its `max_tokens`, ignoring EOS."""

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        self.tokens = seq.request.max_tokens or 1
        super().generate(seq, max_model_len)


async def replay(engine: Engine, trace: list[TraceRequest]) -> TraceStats:
    """Submits each request of `trace` at its recorded time, with its token counts and
    no prefix shared (ShareGPT prompts); the simulated figures."""
    streams = []
    start = virtual_now()
    for i, recorded in enumerate(trace):
        await asyncio.sleep(max(start + recorded.queued - virtual_now(), 0.0))
        ids = [next(_prompt_ids) for _ in range(recorded.input_tokens)]
        request = GenerationRequest(
            f"trace-{i}", "m", [Prompt(ids)], max_tokens=recorded.output_tokens
        )
        streams.append(engine.submit(request))
    await asyncio.gather(*(stream.wait_done() for stream in streams))
    seqs = [stream.sequences[0] for stream in streams]
    return TraceStats.of(
        [(seq.t_first_token or 0.0) - seq.t_submitted for seq in seqs],
        [(seq.t_last_token - (seq.t_first_token or 0.0)) / max(seq.emitted - 1, 1) for seq in seqs],
        [seq.t_last_token - seq.t_submitted for seq in seqs],
    )


def replay_trace() -> tuple[TraceStats, TraceStats]:
    """(simulated, measured) figures of the recorded run."""
    trace = load_trace()
    shape = preset_for(LLAMA_8B)
    assert shape is not None
    model = RooflineModel(shape, gpu_spec("RTX-PRO-6000"))
    kv = KvCacheManager(BlockCache(TRACE_BLOCKS, 16), "", 0.0)
    engine = engine_for(model, _TraceContent(1), TRACE_MAX_NUM_SEQS, TRACE_BUDGET, kv)
    simulated = run_virtual(replay(engine, trace))
    measured = TraceStats.of(
        [r.ttft for r in trace], [r.tpot for r in trace], [r.latency for r in trace]
    )
    return simulated, measured


class _TimedStepLoop(StepLoop):
    """Adds up the CPU time of the step callbacks alone (the streams' own wake-ups are
    the consumers' cost, not the loop's)."""

    spent = 0.0

    def _end_step(self) -> None:
        started = time.perf_counter()
        super()._end_step()
        self.spent += time.perf_counter() - started

    def _kicked(self) -> None:
        started = time.perf_counter()
        super()._kicked()
        self.spent += time.perf_counter() - started


def loop_cost(sequences: int, tokens: int) -> tuple[float, float, int]:
    """(real seconds per step spent in the step loop, simulated seconds per step, steps)
    with `sequences` decoding together."""
    shape = preset_for(LLAMA_8B)
    assert shape is not None
    model = RooflineModel(shape, gpu_spec("H100"))
    engine = engine_for(model, FixedContent(tokens), sequences, kind=_TimedStepLoop)
    loop = engine.timing
    assert isinstance(loop, _TimedStepLoop)
    simulated = run_virtual(run_batch(engine, sequences, 64))
    return loop.spent / loop.steps, simulated / loop.steps, loop.steps


def run(opts: Options) -> BenchReport:
    rep = BenchReport(NAME, "8. Fidelity: simulated against measured vLLM times")
    shape = preset_for(LLAMA_8B)
    assert shape is not None
    rtx = RooflineModel(shape, gpu_spec("RTX-PRO-6000"))
    for point in RTX_PRO_STEPS:
        rep.figures.append(
            Figure(
                NAME,
                f"step {point.label} ms",
                step_point_ms(rtx, point),
                point.measured_ms,
                higher_is_better=False,
            )
        )
    for latency in CI_LATENCY:
        label = f"CI latency {latency.model.split('/')[-1]} TP{latency.tensor_parallel}"
        rep.figures.append(
            Figure(
                NAME,
                f"{label} {latency.gpu} ms",
                ci_latency_ms(latency),
                latency.measured_ms,
                higher_is_better=False,
            )
        )
    for loop_run in OPEN_LOOP:
        ttft, itl = open_loop_ms(loop_run, 20.0 if opts.quick else 60.0)
        label = f"open loop 8B H100 {loop_run.label}"
        rep.figures.append(Figure(NAME, f"{label} mean TTFT ms", ttft, loop_run.ttft_ms, False))
        rep.figures.append(Figure(NAME, f"{label} mean ITL ms", itl, loop_run.itl_ms, False))
    simulated_trace, measured_trace = replay_trace()
    for field_name in ("ttft_mean", "ttft_median", "ttft_p99", "tpot_mean", "latency_mean"):
        rep.figures.append(
            Figure(
                NAME,
                f"trace replay RTX PRO 6000 {field_name.replace('_', ' ')} ms",
                getattr(simulated_trace, field_name) * 1000,
                getattr(measured_trace, field_name) * 1000,
                higher_is_better=False,
            )
        )
    per_step, simulated, steps = loop_cost(1000, 40 if opts.quick else 200)
    rep.figures.append(
        Figure(
            NAME,
            "step loop CPU per step, 1000 seqs (ms)",
            per_step * 1000,
            simulated * 1000,
            higher_is_better=False,
        )
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
