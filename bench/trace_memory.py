"""Trace reading at scale: a generated Mooncake trace of N lines (default 10 million, one
block id each) read by `read_trace` in a fresh process; prints the lines, the seconds
and the reading process's peak memory (VmHWM).

    python -m bench.trace_memory [--lines N] [--hash-ids K]

Standalone (not in `make bench`: generating and reading 10M lines takes minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

_PROBE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from vllm_sim.whatif.trace import read_trace

    started = time.perf_counter()
    trace = read_trace(Path(sys.argv[1]))
    seconds = time.perf_counter() - started
    status = Path("/proc/self/status").read_text()
    peak = int(status.split("VmHWM:")[1].split()[0]) / 1024
    print(f"{len(trace.requests)} requests read in {seconds:.1f} s, peak RSS {peak:.0f} MiB")
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.trace_memory")
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--hash-ids", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.jsonl"
        with path.open("w") as handle:
            for i in range(args.lines):
                ids = [i * args.hash_ids + k for k in range(args.hash_ids)]
                line = {"timestamp": i, "input_length": 512, "output_length": 64, "hash_ids": ids}
                handle.write(json.dumps(line) + "\n")
        size = path.stat().st_size / 2**20
        print(f"{args.lines} lines, {size:.0f} MiB, {args.hash_ids} block ids a line")
        subprocess.run([sys.executable, "-c", _PROBE, str(path)], check=True)


if __name__ == "__main__":
    main()
