"""What a result was made from, so that a result file read alone says it: the trace (its
path and SHA-256), the command line, and the simulator's version."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_sim import __version__

_CHUNK = 1 << 20


def trace_digest(path: str | Path) -> str | None:
    """The SHA-256 of the trace file, read in chunks; None if it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def run_origin(command: str, argv: Sequence[str], trace: str | Path) -> dict[str, Any]:
    """`command` (e.g. "replay") run with `argv` on `trace`."""
    return {
        "trace": str(trace),
        "trace_sha256": trace_digest(trace),
        "command": shlex.join(["vllm-sim", command, *argv]),
        "version": __version__,
    }
