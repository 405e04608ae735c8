"""Data parallelism: one OS process per rank, started and stopped together.

With `--data-parallel-size D`, rank r serves the whole API on port + r with its own engine,
queue, KV cache, metrics and KV events (ZMQ ports offset by r, r in every batch). Separate
processes put ranks on separate cores. The parent only forwards signals and waits: the
first SIGTERM/SIGINT makes every rank drain, a second one makes them exit at once.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from types import FrameType

from vllm_sim.config import Config

RankMain = Callable[[Config, int, int], int]  # (config, port, rank) -> exit status


def _run_rank(main: RankMain, cfg: Config, port: int, rank: int) -> None:
    # Signals reach the rank from the parent; default handlers until its server installs its own.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(main(cfg, port, rank))


def serve_ranks(cfg: Config, main: RankMain) -> int:
    """Runs ranks 0..D-1 as child processes; the worst exit status of them all."""
    # fork keeps start-up fast (nothing to re-import); no thread runs yet at this point.
    context = multiprocessing.get_context("fork")
    ranks: list[BaseProcess] = [
        context.Process(target=_run_rank, args=(main, cfg, cfg.port + r, r), name=f"rank-{r}")
        for r in range(cfg.data_parallel_size)
    ]

    def forward(signum: int, _frame: FrameType | None) -> None:
        for process in ranks:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in ranks:
            process.start()
        for process in ranks:
            process.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max((abs(p.exitcode or 0) for p in ranks), default=0)
