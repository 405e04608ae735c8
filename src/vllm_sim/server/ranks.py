"""Child processes started and stopped together: data-parallel ranks, a fleet's groups.

With `--data-parallel-size D`, rank r serves the whole API on port + r with its own engine,
queue, KV cache, metrics and KV events (ZMQ ports offset by r, r in every batch). Separate
processes put ranks on separate cores. The parent only forwards signals and waits: the
first SIGTERM/SIGINT makes every rank drain, a second one makes them exit at once. A fleet
spread over processes (--fleet-processes) runs the same way, one group of instances each.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

from vllm_sim.config import Config

RankMain = Callable[[Config, int, int], int]  # (config, port, rank) -> exit status
ProcessMain = Callable[[], int]  # a child process's work -> its exit status
_PARENT_POLL = 1.0  # seconds between two checks that the parent still lives


def _run_child(main: ProcessMain) -> None:
    # A group of its own: a Ctrl-C or `timeout` signals the parent's group, and the parent
    # forwards it once; receiving it twice would skip the drain.
    os.setpgrp()
    # The fork inherited the parent's forwarding handler. Here it would signal this rank's
    # own group (its Process object has pid 0 in the child) over and over: until the
    # server installs its own handlers, a stop simply ends the rank.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _stop_with_parent(os.getppid())
    sys.exit(main())


def _stop_with_parent(parent: int) -> None:
    """If the parent dies without forwarding a signal (SIGKILL), the rank stops too."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve_ranks(cfg: Config, main: RankMain) -> int:
    """Runs ranks 0..D-1 as child processes; the worst exit status of them all."""
    return serve_processes(
        [
            (f"rank-{r}", functools.partial(main, cfg, cfg.port + r, r))
            for r in range(cfg.data_parallel_size)
        ]
    )


def serve_processes(children: Sequence[tuple[str, ProcessMain]]) -> int:
    """Runs each (name, main) as a child process, started and stopped together; the worst
    exit status of them all."""
    # fork keeps start-up fast (nothing to re-import); no thread runs yet at this point.
    context = multiprocessing.get_context("fork")
    ranks: list[BaseProcess] = [
        context.Process(target=_run_child, args=(main,), name=name) for name, main in children
    ]

    def forward(signum: int, _frame: FrameType | None) -> None:
        for process in ranks:
            if process.pid and process.is_alive():
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.kill(process.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in ranks:
            process.start()
        _watch(ranks, forward)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max((abs(p.exitcode or 0) for p in ranks), default=0)


def _watch(ranks: list[BaseProcess], forward: Callable[[int, FrameType | None], None]) -> None:
    """Waits for every rank; if one fails (e.g. its port is taken), the others are
    stopped too: the ranks serve together or not at all."""
    running = list(ranks)
    stopping = False
    while running:
        ended = wait([p.sentinel for p in running])
        for process in [p for p in running if p.sentinel in ended]:
            process.join()
            running.remove(process)
            if process.exitcode and not stopping:
                stopping = True
                forward(signal.SIGTERM, None)
