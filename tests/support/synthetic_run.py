"""A vLLM run the simulator itself makes, with step-model coefficients the test chose:
measurements whose true coefficients are known, for calibration to recover."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from vllm_sim.config import Config, load_config
from vllm_sim.whatif.results import RequestRecord
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import Trace, TraceRequest

# Llama-3.1-8B (a bundled shape) on one H100, vLLM's smaller batch limits.
SYNTHETIC_SERVER = [
    "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--timing-model",
    "roofline", "--max-num-seqs", "256", "--max-num-batched-tokens", "2048",
]  # fmt: skip
# The coefficients the synthetic run is made with, away from every default.
KNOWN = {
    "weight_bandwidth_efficiency": 0.62,
    "kv_bandwidth_efficiency": 0.55,
    "compute_efficiency": 0.5,
    "api_server_s": 0.012,
}


def synthetic_trace(quiet: int = 20, burst: int = 80, seed: int = 7) -> Trace:
    """A run with something to tell each coefficient apart: `quiet` requests alone
    (0.6 s apart: the API server's time and one prefill, from 64 to 6,000 tokens, make
    their TTFT; a batch of one, the weights' read, their TPOT), then `burst` requests of
    1,000-6,000 prompt tokens at a rate rising from 4 to 44 a second (prefill chunks
    compete with decodes of long contexts: the KV reads and the compute)."""
    draw = random.Random(seed)
    sends: list[tuple[float, int, int]] = []
    t = 0.0
    for _ in range(quiet):
        prompt = draw.choice((64, 512, 2048, 6000)) + draw.randint(0, 64)
        sends.append((t, prompt, draw.randint(8, 40)))
        t += 0.6
    for i in range(burst):
        t += draw.expovariate(4 + 40 * i / burst)
        sends.append((t, draw.randint(1000, 6000), draw.randint(60, 150)))
    return Trace([TraceRequest(i + 1, a, p, o) for i, (a, p, o) in enumerate(sends)])


def steady_trace(count: int = 160, rate: float = 4.0, seed: int = 5) -> Trace:
    """`count` requests arriving at `rate` a second (Poisson), 200-2,000 prompt and 20-120
    output tokens: a steady load, as long scrapes of /metrics see one."""
    draw = random.Random(seed)
    sends: list[TraceRequest] = []
    t = 0.0
    for i in range(count):
        t += draw.expovariate(rate)
        sends.append(TraceRequest(i + 1, t, draw.randint(200, 2000), draw.randint(20, 120)))
    return Trace(sends)


def synthetic_config() -> Config:
    return load_config(SYNTHETIC_SERVER, {})


def synthetic_records(
    trace: Trace, coefficients: Mapping[str, float] = KNOWN, max_concurrency: int | None = None
) -> list[RequestRecord]:
    """The trace replayed on the synthetic server with `coefficients`, by request."""
    replay = Replay(
        synthetic_config(),
        trace,
        environ={},
        coefficients=dict(coefficients),
        max_concurrency=max_concurrency,
    )
    return sorted(replay.run().records, key=lambda r: r.index)


def write_requests_jsonl(records: Sequence[RequestRecord], path: Path) -> Path:
    """The records as a per-request JSONL in LLMServingSim's spelling (absolute times)."""
    lines = []
    for r in records:
        assert r.ttft is not None and r.e2e is not None
        lines.append(
            json.dumps(
                {
                    "arrival_s": r.arrival,
                    "input_tokens": r.input_tokens,
                    "output_tokens": r.output_tokens,
                    "first_token_s": r.arrival + r.ttft,
                    "last_token_s": r.arrival + r.e2e,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def bench_serve_result(
    records: Sequence[RequestRecord],
    rate: float | str,
    start_times: bool = True,
    max_concurrency: int | None = None,
    burstiness: float = 1.0,
) -> dict[str, object]:
    """The records as `vllm bench serve --save-result --save-detailed` saves a run: one
    list per figure, a request's inter-token gaps as its list."""
    result: dict[str, object] = {
        "date": "20250101-000000",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": len(records),
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "duration": max((r.arrival + (r.e2e or 0.0)) for r in records),
        "completed": len(records),
        "failed": 0,
        "mean_ttft_ms": 0.0,
        "input_lens": [r.input_tokens for r in records],
        "output_lens": [r.output_tokens for r in records],
        "ttfts": [r.ttft for r in records],
        "itls": [[r.itl] * (r.output_tokens - 1) for r in records],
        "errors": ["" for _ in records],
    }
    if start_times:
        result["start_times"] = [12345.0 + r.arrival for r in records]
    return result


def metrics_scrapes(records: Sequence[RequestRecord], every: float, path: Path) -> Path:
    """/metrics snapshots every `every` seconds of the records' run, as vLLM's counters and
    histograms would have them (sums and counts; one +Inf bucket), each after a
    `# scrape <unix seconds>` line."""
    end = max(r.arrival + (r.e2e or 0.0) for r in records)
    lines: list[str] = []
    t = 0.0
    while t < end + every:
        done = [r for r in records if r.e2e is not None and r.arrival + r.e2e <= t]
        lines.append(f"# scrape {1_700_000_000 + t}")
        for name, value in (
            ("request_success", len(done)),
            ("prompt_tokens", sum(r.input_tokens for r in done)),
            ("generation_tokens", sum(r.output_tokens for r in done)),
        ):
            lines += [
                f"# HELP vllm:{name}_total Count.",
                f"# TYPE vllm:{name}_total counter",
                f'vllm:{name}_total{{model_name="m"}} {value}',
            ]
        gaps = [(r.e2e or 0.0) - (r.ttft or 0.0) for r in done]
        for name, total, count in (
            ("time_to_first_token_seconds", sum(r.ttft or 0.0 for r in done), len(done)),
            ("e2e_request_latency_seconds", sum(r.e2e or 0.0 for r in done), len(done)),
            ("inter_token_latency_seconds", sum(gaps), sum(r.output_tokens - 1 for r in done)),
        ):
            lines += [
                f"# HELP vllm:{name} Histogram.",
                f"# TYPE vllm:{name} histogram",
                f'vllm:{name}_bucket{{le="+Inf",model_name="m"}} {count}',
                f'vllm:{name}_count{{model_name="m"}} {count}',
                f'vllm:{name}_sum{{model_name="m"}} {total}',
            ]
        t += every
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
