"""`python -m bench [--quick] [--only NAME] [--json PATH]`: run the benchmarks, print ratios."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import (
    calibration,
    fidelity,
    fleet,
    grpc_streaming,
    instructions,
    knee,
    kv,
    overload,
    pacing,
    report,
    sim_to_real,
    startup,
    streaming,
    throughput,
    timing,
    tokenizer,
    whatif,
)
from bench.cpu import CLIENT_CPU, SERVER_CPU, can_pin
from bench.load import LoadError
from bench.options import Options
from bench.report import BenchReport, Unavailable
from bench.servers import ServerError


@dataclass(frozen=True, slots=True)
class Benchmark:
    run: Callable[[Options], BenchReport]
    show: Callable[[BenchReport], None]


BENCHMARKS = {
    throughput.NAME: Benchmark(throughput.run, throughput.show),
    streaming.NAME: Benchmark(streaming.run, streaming.show),
    timing.NAME: Benchmark(timing.run, timing.show),
    startup.NAME: Benchmark(startup.run, startup.show),
    kv.NAME: Benchmark(kv.run, kv.show),
    tokenizer.NAME: Benchmark(tokenizer.run, tokenizer.show),
    knee.NAME: Benchmark(knee.run, knee.show),
    fidelity.NAME: Benchmark(fidelity.run, fidelity.show),
    sim_to_real.NAME: Benchmark(sim_to_real.run, sim_to_real.show),
    grpc_streaming.NAME: Benchmark(grpc_streaming.run, grpc_streaming.show),
    instructions.NAME: Benchmark(instructions.run, instructions.show),
    pacing.NAME: Benchmark(pacing.run, pacing.show),
    whatif.NAME: Benchmark(whatif.run, whatif.show),
    fleet.NAME: Benchmark(fleet.run, fleet.show),
    overload.NAME: Benchmark(overload.run, overload.show),
    calibration.NAME: Benchmark(calibration.run, calibration.show),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs (about a minute)")
    parser.add_argument(
        "--only", action="append", choices=sorted(BENCHMARKS), help="run only this (repeatable)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON here")
    parser.add_argument(
        "--base",
        default="HEAD~1",
        metavar="REV",
        help="the commit whose instructions per request are counted beside this one's",
    )
    return parser.parse_args(argv)


def machine() -> dict[str, object]:
    pinned = can_pin()
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "pinning": f"server CPU {SERVER_CPU}, client CPU {CLIENT_CPU}" if pinned else "off",
        "load average": round(os.getloadavg()[0], 2),  # others' work adds noise
    }


def run_one(name: str, opts: Options) -> BenchReport | None:
    bench = BENCHMARKS[name]
    try:
        rep = bench.run(opts)
    except (ServerError, LoadError, Unavailable) as exc:
        print(f"{name}: could not run: {exc}")
        return None
    print(f"\n{rep.title}")
    bench.show(rep)
    report.print_problems(rep.problems + report.problems_of(rep.runs))
    sys.stdout.flush()
    return rep


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    opts = Options(quick=args.quick, base=args.base)
    names = args.only or list(BENCHMARKS)
    header: dict[str, object] = {"mode": "quick" if opts.quick else "full", **machine()}
    print("vllm-sim benchmarks: " + ", ".join(f"{k} {v}" for k, v in header.items()), flush=True)
    started = time.monotonic()
    reports = [rep for name in names if (rep := run_one(name, opts)) is not None]
    print("\nSummary (sim/base: the simulator's figure over the baseline's)")
    print(report.summary([f for rep in reports for f in rep.figures]))
    elapsed = time.monotonic() - started
    print(f"\ntotal {elapsed:.0f} s")
    if args.json:
        report.write_json(args.json, {**header, "seconds": round(elapsed, 1)}, reports)
        print(f"wrote {args.json}")
    return 0 if len(reports) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
