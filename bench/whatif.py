"""13. What-if: trace replay in simulated time, against the recorded vLLM run and the live
server, its speed, and a router comparison.

- The bundled LLMServingSim trace (Llama-3.1-8B on an RTX PRO 6000, 300 requests) replayed
  through one instance: TTFT, TPOT and latency means against the recorded vLLM run, and
  the running-sequences curve's top (vLLM's runs at max_num_seqs, 128).
- Speed: 10,000 requests (the trace tiled, arrivals spread so the instance keeps up), the
  simulated seconds over the real seconds the replay took, on one core.
- Two clocks, one engine: the same trace replayed in simulated time and sent over HTTP to
  the live server started with --time-scale 4 (`replay --target --speedup 4`, ~20 s):
  every mean side by side.
- Routers: a Mooncake trace of shared prefixes (16 prefixes of 8 blocks, 2,000 requests)
  over 4 instances, round-robin against prefix-aware: prefix-cache hit rate and TTFT p50.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import report
from bench.options import Options
from bench.report import BenchReport, Figure
from bench.servers import simulator
from vllm_sim.config import load_config
from vllm_sim.whatif.output import read_result
from vllm_sim.whatif.results import RunResult
from vllm_sim.whatif.simulation import replay
from vllm_sim.whatif.trace import MOONCAKE_BLOCK, Trace, TraceRequest, read_trace

NAME = "whatif"
TRACE = Path(__file__).parent / "data" / "llmservingsim_rtxpro6000_llama8b.csv"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# LLMServingSim's vLLM configuration (its KV cache held 35,913 blocks of 16 tokens).
TRACE_FLAGS = [
    "--model", MODEL, "--gpu", "RTX-PRO-6000", "--timing-model", "roofline",
    "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
    "--num-gpu-blocks-override", "35913", "--max-model-len", "8192",
]  # fmt: skip
TIME_SCALE = 4.0


def measured_means() -> dict[str, float]:
    """The recorded vLLM run's per-request means, seconds."""
    import csv

    ttft, tpot, latency = [], [], []
    with TRACE.open(newline="") as handle:
        for row in csv.DictReader(handle):
            queued, first, last = (
                float(row[k]) for k in ("queued_s", "first_token_s", "last_token_s")
            )
            ttft.append(first - queued)
            tpot.append((last - first) / max(int(row["output_tokens"]) - 1, 1))
            latency.append(last - queued)
    return {
        "ttft_mean": sum(ttft) / len(ttft),
        "itl_mean": sum(tpot) / len(tpot),
        "e2e_mean": sum(latency) / len(latency),
    }


def tiled(trace: Trace, count: int, stretch: float) -> Trace:
    """`count` requests: the trace repeated end to end, its arrivals `stretch` times apart."""
    span = trace.requests[-1].arrival + 1.0
    out: list[TraceRequest] = []
    k = 0
    while len(out) < count:
        for r in trace.requests[: count - len(out)]:
            arrival = (k * span + r.arrival) * stretch
            out.append(TraceRequest(r.line, arrival, r.input_length, r.output_length))
        k += 1
    return Trace(out)


def shared_prefix_trace(requests: int, prefixes: int, blocks: int, seed: int = 1) -> Trace:
    """Mooncake-style requests, each one of `prefixes` shared prompts of `blocks` blocks
    plus one block of its own, arriving at 20 a second."""
    rng = random.Random(seed)
    out = []
    for i in range(requests):
        prefix = rng.randrange(prefixes)
        ids = (*(prefix * 1000 + b for b in range(blocks)), 10**9 + i)
        out.append(TraceRequest(i + 1, i / 20.0, len(ids) * MOONCAKE_BLOCK, 64, ids))
    return Trace(out)


def run(opts: Options) -> BenchReport:
    rep = BenchReport(NAME, "13. What-if: replay in simulated time")
    cfg = load_config(TRACE_FLAGS, {})
    trace = read_trace(TRACE)
    simulated = replay(cfg, trace)
    measured = measured_means()
    for key in ("ttft_mean", "itl_mean", "e2e_mean"):
        rep.figures.append(
            Figure(NAME, f"trace {key.replace('_', ' ')} ms (vs recorded vLLM)",
                   simulated.summary.means()[key] * 1000, measured[key] * 1000, False)
        )  # fmt: skip
    rep.figures.append(
        Figure(
            NAME, "trace max running (vs max_num_seqs)", simulated.summary.max_running, 128, True
        )
    )
    count = 2_000 if opts.quick else 10_000
    speed = replay(cfg, tiled(trace, count, 2.0))
    rep.figures.append(
        Figure(
            NAME,
            f"{count} requests x real time (vs 200)",
            speed.summary.duration / speed.wall_seconds,
            200.0,
            True,
        )
    )
    rep.problems += (
        []
        if speed.summary.failed == 0
        else [f"{speed.summary.failed} requests failed in the speed run"]
    )
    _routers(rep, opts)
    _two_clocks(rep, simulated, trace)
    return rep


def _routers(rep: BenchReport, opts: Options) -> None:
    cfg = load_config([*TRACE_FLAGS, "--num-gpu-blocks-override", "3000"], {})
    trace = shared_prefix_trace(800 if opts.quick else 2_000, 16, 8)
    results = {name: replay(cfg, trace, 4, name) for name in ("round-robin", "prefix-aware")}
    rr, pa = results["round-robin"].summary, results["prefix-aware"].summary
    ttft_rr, ttft_pa = rr.latencies["ttft"], pa.latencies["ttft"]
    assert ttft_rr is not None and ttft_pa is not None
    rep.figures.append(
        Figure(
            NAME,
            "prefix-aware hit rate % (vs round-robin)",
            100 * pa.prefix_cache_hit_rate,
            100 * rr.prefix_cache_hit_rate,
            True,
        )
    )
    rep.figures.append(
        Figure(
            NAME,
            "prefix-aware TTFT p50 ms (vs round-robin)",
            1000 * ttft_pa.p50,
            1000 * ttft_rr.p50,
            False,
        )
    )


def _two_clocks(rep: BenchReport, simulated: RunResult, trace: Trace) -> None:
    """The same trace over HTTP against the live server at --time-scale, every mean. (The
    whole trace, in quick mode too: a shorter one has TTFTs of a few tens of milliseconds,
    which the HTTP round trip, scaled up by the time scale, would visibly add to.)"""
    server = simulator(MODEL, [*TRACE_FLAGS[2:], "--time-scale", str(TIME_SCALE)], name="live")
    with tempfile.TemporaryDirectory() as folder, server:
        sent = Path(folder) / "trace.csv"
        sent.write_text(
            "arrival_s,input_tokens,output_tokens\n"
            + "".join(f"{r.arrival},{r.input_length},{r.output_length}\n" for r in trace.requests)
        )
        out = Path(folder) / "http"
        argv = [sys.executable, "-m", "vllm_sim", "replay", str(sent), "--quiet", "--no-plots",
                "--out", str(out), "--target", f"http://127.0.0.1:{server.port}",
                "--speedup", str(TIME_SCALE)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            rep.problems.append(f"HTTP replay failed: {done.stderr.strip()[-300:]}")
            return
        live = read_result(out)["means"]
    for key, value in simulated.summary.means().items():
        if key in live and value:
            rep.figures.append(
                Figure(
                    NAME,
                    f"HTTP at time-scale {TIME_SCALE:g} / simulated: {key}",
                    live[key],
                    value,
                    False,
                )
            )


def show(rep: BenchReport) -> None:
    rows = [[f.metric, f"{f.sim:.4g}", f"{f.base:.4g}", f"{f.ratio:.3f}"] for f in rep.figures]
    print(report.table(["figure", "this", "reference", "ratio"], rows))
