"""The build: setuptools, with the modules every request and every token runs through
compiled by mypyc where a C compiler is at hand (pure Python everywhere else, or with
VLLM_SIM_PURE_PYTHON=1). pyproject.toml holds everything else."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from typing import Any

from setuptools import setup

# What compiles: the HTTP kernel's request path, the front end's pipeline and token driver,
# the engine (its core, timing, KV cache, content), the metrics it records into, and the
# protocol code every token of a stream runs (chat chunks, the OpenAI encoding helpers).
# Modules that define msgspec Structs stay interpreted (mypyc cannot compile a class with
# another extension type's metaclass), and so do those that do bulk work on worker threads
# (tokenizing a large prompt, reading a long conversation, a large answer's logprobs):
# compiled code never lets go of the GIL between its own steps, so a long loop in it would
# hold the event loop's thread off for its whole length.
NATIVE = [
    "src/vllm_sim/engine/admission.py",
    "src/vllm_sim/engine/budget.py",
    "src/vllm_sim/engine/clock.py",
    "src/vllm_sim/engine/content.py",
    "src/vllm_sim/engine/core.py",
    "src/vllm_sim/engine/errors.py",
    "src/vllm_sim/engine/finish.py",
    "src/vllm_sim/engine/kv_blocks.py",
    "src/vllm_sim/engine/latency.py",
    "src/vllm_sim/engine/lifecycle.py",
    "src/vllm_sim/engine/lora.py",
    "src/vllm_sim/engine/observer.py",
    "src/vllm_sim/engine/request.py",
    "src/vllm_sim/engine/sequence.py",
    "src/vllm_sim/engine/turn.py",
    "src/vllm_sim/engine/view.py",
    "src/vllm_sim/engine/timing/release.py",
    "src/vllm_sim/engine/timing/speculative.py",
    "src/vllm_sim/engine/timing/steps.py",
    "src/vllm_sim/engine/timing/strategy.py",
    "src/vllm_sim/engine/timing/token_clock.py",
    "src/vllm_sim/engine/kvcache/cache.py",
    "src/vllm_sim/engine/kvcache/fnv.py",
    "src/vllm_sim/engine/kvcache/hashing.py",
    "src/vllm_sim/engine/kvcache/manager.py",
    "src/vllm_sim/engine/generation/draws.py",
    "src/vllm_sim/engine/generation/echo.py",
    "src/vllm_sim/engine/generation/lengths.py",
    "src/vllm_sim/engine/generation/logprobs.py",
    "src/vllm_sim/engine/generation/sentences.py",
    "src/vllm_sim/engine/generation/stops.py",
    "src/vllm_sim/engine/generation/toolcalls.py",
    "src/vllm_sim/metrics/families.py",
    "src/vllm_sim/metrics/recorder.py",
    "src/vllm_sim/metrics/lag.py",
    "src/vllm_sim/http/connection.py",
    "src/vllm_sim/http/exchange.py",
    "src/vllm_sim/http/app.py",
    "src/vllm_sim/http/wire.py",
    "src/vllm_sim/http/messages.py",
    "src/vllm_sim/http/limits.py",
    "src/vllm_sim/http/state.py",
    "src/vllm_sim/frontend/pipeline.py",
    "src/vllm_sim/frontend/context.py",
    "src/vllm_sim/frontend/usage.py",
    "src/vllm_sim/frontend/driver.py",
    "src/vllm_sim/frontend/access.py",
    "src/vllm_sim/frontend/failures.py",
    "src/vllm_sim/frontend/request_rules.py",
    "src/vllm_sim/frontend/omni.py",
    "src/vllm_sim/frontend/errors.py",
    "src/vllm_sim/transports/http/generation.py",
    "src/vllm_sim/transports/http/conventions.py",
    "src/vllm_sim/protocols/common/encoding.py",
    "src/vllm_sim/protocols/common/answers.py",
    "src/vllm_sim/engine/tokenizer/base.py",
    "src/vllm_sim/protocols/openai/chat_stream.py",
]


def _compiler() -> bool:
    command = (sysconfig.get_config_var("CC") or "cc").split()
    return bool(command) and shutil.which(command[0]) is not None


def native_modules() -> list[Any]:
    """mypyc's extensions, or none (a pure-Python install) when they cannot be built."""
    if os.environ.get("VLLM_SIM_PURE_PYTHON") or not _compiler():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    # The project's mypy settings check the whole tree with its dev stubs; the build sees
    # only these modules and their imports, with no stubs installed.
    # No cache: one left by a development run (with every dependency's types) would hide
    # what a fresh build environment lacks.
    flags = [
        "--config-file=",
        "--ignore-missing-imports",
        "--python-version=3.11",
        "--cache-dir=" + os.devnull,
    ]
    try:
        return list(mypycify([*flags, *NATIVE], opt_level="3", debug_level="0"))
    except BaseException as error:  # mypyc reports type errors by exiting
        print(f"vllm-sim: building pure Python: mypyc failed ({error!r})", file=sys.stderr)
        return []


setup(ext_modules=native_modules())
