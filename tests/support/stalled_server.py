"""`python -m tests.support.stalled_server SECONDS ARGS...`: the simulator (`python -m
vllm_sim ARGS...`) whose event loop blocks for SECONDS after every engine step that
released tokens, before those tokens are written: a server process that falls behind its
own engine, as one starved of CPU does, but by a known amount and on any machine.

The blocking is a `time.sleep` in the engine's observer (tests.support.stall), installed
by wrapping the composition root's engine factory; everything else is the real server.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tests.support.stall import StallingObserver
from vllm_sim.__main__ import main
from vllm_sim.engine.core import Engine
from vllm_sim.server import build


def install(seconds: float) -> None:
    original = build.build_engine

    def build_engine(*args: Any, **kwargs: Any) -> Engine:
        engine = original(*args, **kwargs)
        engine.observer = StallingObserver(engine.observer, lambda _: time.sleep(seconds))
        return engine

    build.build_engine = build_engine


if __name__ == "__main__":
    install(float(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
