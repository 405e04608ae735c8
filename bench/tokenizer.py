"""6. The model's own tokenizer against the simulated one: zero-latency chat throughput
(same body as benchmark 1, so the prompt is tokenized once and remembered, as repeated
system prompts and benchmark prompts are), and start-up time.

The model folder is built here (a byte-level BPE trained on this repository's text, with
a Qwen-style chat template; see tests/support/hf_models.py), so nothing is downloaded."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench import report
from bench.load import alternate, running
from bench.options import Options
from bench.report import BenchReport, Column, Figure, best_round
from bench.servers import Server, simulator
from bench.throughput import CONNECTIONS, SIM_ARGS, chat_load
from tests.support.hf_models import train_tokenizer, write_model_folder

NAME = "tokenizer"
SIMULATED, REAL = "simulated tokenizer", "model tokenizer"
OFFLINE = {"HF_HUB_OFFLINE": "1"}

COLUMNS: list[Column] = [
    ("req/s", lambda r: report.rate(r.rate)),
    ("p50 ms", lambda r: report.ms(r.latency.p50)),
    ("p99 ms", lambda r: report.ms(r.latency.p99)),
    *report.CPU_COLUMNS,
]


def _servers(opts: Options, folder: Path) -> list[Server]:
    real_args = [*SIM_ARGS, "--served-model-name", opts.model]
    return [
        simulator(opts.model, SIM_ARGS, SIMULATED, OFFLINE),
        simulator(str(folder), real_args, REAL, OFFLINE),
    ]


def _median_start(servers: list[Server]) -> float:
    for server in servers:
        with server:
            pass
    return statistics.median(server.started_in for server in servers)


def run(opts: Options) -> BenchReport:
    warmup, duration, rounds = opts.plan(full=(1.0, 4.0, 3), quick=(1.0, 2.0, 2))
    starts = 5 if not opts.quick else 3
    title = (
        f"6. Model tokenizer vs simulated: chat throughput at zero latency, {CONNECTIONS} "
        f"connections, best of {rounds} rounds of {duration:g} s; start-up, median of {starts}"
    )
    rep = BenchReport(NAME, title)
    spec = chat_load(opts, warmup, duration)
    with tempfile.TemporaryDirectory() as root:
        folder = write_model_folder(train_tokenizer(), Path(root) / "model", "qwen")
        servers = _servers(opts, folder)
        with running(servers):
            per_server = alternate(servers, spec, rounds)
        rep.problems += report.server_problems(servers)
        for server, results in zip(servers, per_server, strict=True):
            rep.runs.append(best_round(server.name, CONNECTIONS, results, lambda r: r.rate))
        started = [_servers(opts, folder) for _ in range(starts)]
        simulated_start = _median_start([pair[0] for pair in started])
        real_start = _median_start([pair[1] for pair in started])
    simulated, real = rep.load(SIMULATED, CONNECTIONS), rep.load(REAL, CONNECTIONS)
    rep.figures += [
        Figure(NAME, "requests/s model/simulated tokenizer", real.rate, simulated.rate, True),
        Figure(NAME, "start to /health s model/simulated", real_start, simulated_start, False),
    ]
    return rep


def show(rep: BenchReport) -> None:
    print(report.runs_table(rep.runs, COLUMNS))
