"""15. Truth under overload: what the clients saw against what /metrics says.

One server process on one core serving more streams than it can write on time: a 1B model
(meta-llama/Llama-3.2-1B's shape) under `--timing-model roofline --gpu H100` with
`--max-num-seqs 1024` and 1,024 closed-loop streams, where every step releases about a
thousand tokens the process then writes one stream at a time; and the same server at 16
streams, which it keeps up with. For each: the mean TTFT, ITL and E2E the load client
measured beside the means of vLLM's histograms over the same window (their `_sum` and
`_count` scraped at the window's start and end), the simulator's output-lag gauges at the
window's end (how long written output trails the engine's release of it) and the lag
warnings the server logged. Close figures mean /metrics tells the truth; under overload
the gap left is what happens before the server reads a request (it sits in the socket
while the loop is busy), which no server-side clock sees.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import report
from bench.load import SETTLE, measure, running
from bench.options import Options, chat_body
from bench.report import BenchReport, Column, Figure, Measured
from bench.servers import Server, simulator
from bench.spec import LoadSpec, Percentiles

NAME = "overload"
MODEL = "meta-llama/Llama-3.2-1B"
# Its config.json's shape (the bundled presets start at 1.5B): a hub cache is made for it,
# so that the roofline model reads it as it would a downloaded one.
LLAMA_32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
SIM_ARGS = [
    "--max-num-seqs", "1024", "--timing-model", "roofline", "--gpu", "H100",
    "--max-model-len", "4096",
]  # fmt: skip
TOKENS = 100
SHAPES = (1024, 16)  # concurrent streams
# From the client's launch to the start of its window, before the warm-up: its interpreter
# and imports. The scrapes are aimed at the window with this guess; a few hundred
# milliseconds off changes little over a steady closed loop.
CLIENT_START = 0.25
WARNING = "cannot keep up"  # in the server's lag warning
WARNING_PERIOD = 10.0  # the warning's rate limit, seconds

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
LAG = "vllm_sim:output_lag_seconds"
LAG_MAX = "vllm_sim:output_lag_max_seconds"

COLUMNS: list[Column] = [
    ("client TTFT mean/p50/p99/max ms", lambda r: _four(r.ttft)),
    ("client ITL mean/p50/p99/max ms", lambda r: _four(r.itl)),
    ("client E2E mean ms", lambda r: report.ms(r.latency.mean)),
    ("tokens/s", lambda r: report.rate(r.event_rate)),
    *report.CPU_COLUMNS,
    ("client lag p99 ms", lambda r: report.ms(r.client_lag.p99)),
]


def _four(p: Percentiles) -> str:
    return f"{p.mean:.1f} / {p.p50:.1f} / {p.p99:.1f} / {p.max:.0f}"  # milliseconds


def _hub_cache(root: Path) -> dict[str, str]:
    """A hub cache holding the model's config.json alone; the server's environment."""
    repo = root / ("models--" + MODEL.replace("/", "--"))
    commit = "0" * 40
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(LLAMA_32_1B))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return {"HF_HUB_CACHE": str(root), "HF_HUB_OFFLINE": "1"}


def scrape(port: int) -> dict[str, float]:
    """Every unlabelled-or-single-series sample of the page by name (histogram _sum and
    _count, gauges)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        samples[name] = float(line.rsplit(" ", 1)[1])
    return samples


class Window:
    """Scrapes /metrics at two instants from a thread while the load runs."""

    def __init__(self, port: int, start: float, end: float) -> None:
        self.pages: list[dict[str, float]] = []
        self._thread = threading.Thread(target=self._run, args=(port, start, end), daemon=True)
        self._thread.start()

    def _run(self, port: int, start: float, end: float) -> None:
        for instant in (start, end):
            time.sleep(max(0.0, instant - time.monotonic()))
            self.pages.append(scrape(port))

    def join(self) -> tuple[dict[str, float], dict[str, float]]:
        self._thread.join()
        if len(self.pages) != 2:
            raise RuntimeError("a /metrics scrape failed")
        return self.pages[0], self.pages[1]


def mean_ms(before: dict[str, float], after: dict[str, float], family: str) -> float:
    """The mean of a histogram's observations between two scrapes, in milliseconds."""
    count = after.get(family + "_count", 0.0) - before.get(family + "_count", 0.0)
    total = after.get(family + "_sum", 0.0) - before.get(family + "_sum", 0.0)
    return total / count * 1000.0 if count else 0.0


@contextmanager
def _server(model: str) -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="vllm-sim-overload-") as root:
        server = simulator(model, SIM_ARGS, env=_hub_cache(Path(root)))
        with running([server]):
            yield server


def run(opts: Options) -> BenchReport:
    # Long warm-ups: the first wave of 1,024 connections is accepted over seconds, and its
    # requests (whose wait in the listener's backlog no server clock sees) stay out.
    warmup, duration, _ = opts.plan(full=(12.0, 10.0, 1), quick=(8.0, 5.0, 1))
    title = (
        f"15. Truth under overload: {MODEL} shape, roofline on H100, --max-num-seqs 1024, "
        f"{TOKENS}-token streams; client against /metrics over {duration:g} s after "
        f"{warmup:g} s, a fresh server per load"
    )
    rep = BenchReport(NAME, title)
    body = chat_body(MODEL, max_tokens=TOKENS, stream=True)
    for streams in SHAPES:
        spec = load_spec(body, streams, warmup, duration)
        with _server(MODEL) as server:
            launched = time.monotonic() + SETTLE + CLIENT_START
            window = Window(server.port, launched + warmup, launched + warmup + duration)
            load = measure(server, spec)
            before, after = window.join()
            warnings = sum(1 for line in server.log_text().splitlines() if WARNING in line)
            run_seconds = time.monotonic() - launched
        rep.runs.append(Measured("simulator", streams, load))
        rep.problems += [p for p in report.server_problems([server]) if WARNING not in p]
        shape = f"{streams} streams"
        client_itl = load.itl.mean
        rep.figures += [
            Figure(NAME, f"{shape} TTFT mean ms (/metrics vs client)",
                   mean_ms(before, after, TTFT), load.ttft.mean, False),
            Figure(NAME, f"{shape} ITL mean ms (/metrics vs client)",
                   mean_ms(before, after, ITL), client_itl, False),
            Figure(NAME, f"{shape} E2E mean ms (/metrics vs client)",
                   mean_ms(before, after, E2E), load.latency.mean, False),
            Figure(NAME, f"{shape} output lag mean ms (gauge vs client ITL)",
                   after.get(LAG, 0.0) * 1000.0, client_itl, False),
            Figure(NAME, f"{shape} output lag max ms (gauge vs client ITL)",
                   after.get(LAG_MAX, 0.0) * 1000.0, client_itl, False),
            Figure(NAME, f"{shape} lag warnings (vs one per {WARNING_PERIOD:g} s)",
                   warnings, max(run_seconds / WARNING_PERIOD, 1.0), False),
        ]  # fmt: skip
    return rep


def load_spec(body: str, streams: int, warmup: float, duration: float) -> LoadSpec:
    return LoadSpec(
        port=0,
        body=body,
        connections=streams,
        warmup=warmup,
        duration=duration,
        tokens=TOKENS,
        drain_timeout=30.0,
    )


def show(rep: BenchReport) -> None:
    print(report.runs_table(rep.runs, COLUMNS))
    by_name = {figure.metric: figure for figure in rep.figures}
    rows = []
    for streams in SHAPES:
        shape = f"{streams} streams"

        def pair(what: str, shape: str = shape) -> str:
            figure = by_name[f"{shape} {what} mean ms (/metrics vs client)"]
            return f"{figure.base:.1f} / {figure.sim:.1f}"

        lag = by_name[f"{shape} output lag mean ms (gauge vs client ITL)"].sim
        lag_max = by_name[f"{shape} output lag max ms (gauge vs client ITL)"].sim
        warnings = by_name[f"{shape} lag warnings (vs one per {WARNING_PERIOD:g} s)"].sim
        rows.append(
            [shape, pair("TTFT"), pair("ITL"), pair("E2E"), f"{lag:.1f} / {lag_max:.1f}",
             f"{warnings:.0f}"]
        )  # fmt: skip
    header = [
        "load", "TTFT ms client / metrics", "ITL ms client / metrics",
        "E2E ms client / metrics", "lag gauge mean / max ms", "lag warnings",
    ]  # fmt: skip
    print(report.table(header, rows))
