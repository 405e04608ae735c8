"""`vllm-sim plan`: the cheapest fleet that serves a trace within an SLO (see plan.py).

    vllm-sim plan --trace TRACE --slo LIMITS --gpu GPUS [plan options] [server flags]

Flags plan does not know are server flags (`--model`, `--max-model-len`, a `--config`
YAML file, ...), read exactly as the server reads them; --timing-model is roofline.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from vllm_sim.whatif import plan as planning
from vllm_sim.whatif.arguments import OneLineParser, bounded_int, flag_value, positive_int
from vllm_sim.whatif.interrupts import Interrupts
from vllm_sim.whatif.origin import run_origin
from vllm_sim.whatif.outdir import OutFolder, OutFolderError
from vllm_sim.whatif.report import frontier_rows, write_plan
from vllm_sim.whatif.routers import ROUTERS
from vllm_sim.whatif.trace import TRACE_FORMATS, TraceError

MAX_WORKERS = 256
MAX_CHOICE = 1 << 20  # a --tp / --max-num-seqs / --max-num-batched-tokens value at most
MAX_CHOICES = 64  # values in one of those lists at most
PLAN_USAGE = (
    "vllm-sim plan --trace TRACE --slo METRIC=LIMIT,... --gpu GPU[,GPU...] [options] [server flags]"
)


def plan_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="vllm-sim plan",
        usage=PLAN_USAGE,
        description=(
            "Searches GPU x tensor-parallel size x max-num-seqs x max-num-batched-tokens x "
            "replicas for the cheapest fleet whose replay of the trace (roofline timing) "
            "meets the SLO. Flags not listed here are server flags (--model, ...)."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("--trace", type=Path, required=True, help="the trace to serve")
    parser.add_argument("--slo", required=True, help="limits, e.g. ttft_p99=500ms,itl_p99=50ms")
    parser.add_argument("--gpu", required=True, help="GPUs to consider, comma-separated")
    parser.add_argument("--tp", default="1,2,4,8", help="tensor-parallel sizes (default 1,2,4,8)")
    parser.add_argument(
        "--max-num-seqs-choices",
        default="64,128,256",
        help="max-num-seqs values (default 64,128,256)",
    )
    parser.add_argument(
        "--max-num-batched-tokens-choices",
        default="2048,8192",
        help="max-num-batched-tokens values (default 2048,8192)",
    )
    parser.add_argument(
        "--kv-offloading-size-choices",
        default="0",
        help="CPU KV offloading tiers to weigh, GiB per replica (default 0: none), e.g. 0,100",
    )
    parser.add_argument(
        "--max-replicas",
        type=bounded_int(1, planning.MAX_REPLICAS),
        default=64,
        help=f"replicas at most (default 64, at most {planning.MAX_REPLICAS})",
    )
    parser.add_argument(
        "--router", choices=ROUTERS, default="least-requests", help="the fleet's router"
    )
    parser.add_argument(
        "--gpu-cost", default="", help="dollars per GPU-hour, e.g. H100=2.5,H200=3.2"
    )
    parser.add_argument("--format", choices=TRACE_FORMATS, default="auto", dest="trace_format")
    parser.add_argument("--limit", type=positive_int, help="plan for the first N requests only")
    parser.add_argument(
        "--out", type=Path, default=Path("plan-out"), help="output folder (default plan-out)"
    )
    parser.add_argument(
        "--workers",
        type=bounded_int(1, MAX_WORKERS),
        help=f"local worker processes (default: one per core, at most {MAX_WORKERS})",
    )
    parser.add_argument("--ray", metavar="ADDRESS", help="run the search on this Ray cluster")
    parser.add_argument("--no-plots", action="store_true", help="no PNG picture of the frontier")
    return parser


def plan_main(argv: Sequence[str]) -> int:
    args, server_flags = plan_parser().parse_known_args(list(argv))
    args.argv = list(argv)
    with Interrupts() as interrupts:
        out: OutFolder | None = None
        try:
            out = OutFolder.prepare(args.out)  # before any compute: a bad --out is one line
            return _plan(args, server_flags, out, interrupts)
        except OutFolderError as error:
            print(f"vllm-sim plan: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(
                f"vllm-sim plan: interrupted ({interrupts.name}); nothing written", file=sys.stderr
            )
            return interrupts.exit_status
        finally:
            if out is not None:
                out.discard()


def _plan(
    args: argparse.Namespace, server_flags: list[str], out: OutFolder, interrupts: Interrupts
) -> int:
    try:
        slo = planning.parse_slo(args.slo)
        gpus = _names(args.gpu)
        spec_file = flag_value(server_flags, "--gpu-spec-file") or ""
        costs = planning.gpu_costs(gpus, _costs(args.gpu_cost), spec_file)
        jobs_of = planning.candidates(
            gpus,
            _ints(args.tp, "--tp"),
            _ints(args.max_num_seqs_choices, "--max-num-seqs-choices"),
            _ints(args.max_num_batched_tokens_choices, "--max-num-batched-tokens-choices"),
            _sizes(args.kv_offloading_size_choices),
        )
        # A bad trace stops here; read once, the forked workers share it.
        planning.load_trace(str(args.trace), args.trace_format, args.limit)
        _profile_warnings(flag_value(server_flags, "--timing-profile"), gpus, spec_file)
        executor = (
            planning.ray_executor(args.ray)
            if args.ray
            else planning.local_executor(
                args.workers or planning.default_workers(), _progress_line(len(jobs_of))
            )
        )
    except (ValueError, TraceError) as error:
        print(f"vllm-sim plan: {error}", file=sys.stderr)
        return 2
    flags = (*server_flags, "--timing-model", "roofline")
    environ = tuple(os.environ.items())
    jobs = [
        planning.PlanJob(
            c,
            str(args.trace),
            args.trace_format,
            args.limit,
            flags,
            tuple(slo.items()),
            args.max_replicas,
            args.router,
            costs[c.gpu],
            environ,
        )
        for c in jobs_of
    ]
    result = planning.plan(jobs, slo, executor)
    result.origin = run_origin("plan", args.argv, args.trace)
    # A partial plan is written at once: no picture (matplotlib takes seconds).
    write_plan(result, out, not args.no_plots and not result.partial)
    print(_plan_text(result, args.out))
    if result.partial:
        searched = len(jobs) - len(result.unsearched)
        print(
            f"vllm-sim plan: interrupted ({interrupts.name}): wrote a partial plan ({searched} "
            f"of {len(jobs)} candidates searched) to {args.out}",
            file=sys.stderr,
        )
        return interrupts.exit_status
    return 0 if result.best is not None else 1


def _plan_text(result: planning.Plan, folder: Path) -> str:
    header, rows = frontier_rows(result)
    partial = (
        [
            f"PARTIAL PLAN: interrupted with {len(result.unsearched)} of "
            f"{len(result.results) + len(result.unsearched)} candidates not searched; the "
            "plan below is the best of those searched"
        ]
        if result.partial
        else []
    )
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = partial + [
        "  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    for skipped in (r for r in result.results if r.skipped):
        c = skipped.candidate
        lines.append(f"skipped {c.gpu} TP{c.tensor_parallel}: {skipped.skipped}")
    best = result.best
    if best is not None:
        c = best.candidate
        lines.append(f"plan: {best.replicas} x {c.describe()}, ${best.cost_per_hour:.2f}/h")
    else:
        closest = result.closest
        lines.append("no fleet meets the SLO")
        if closest is not None:
            c = closest.candidate
            misses = (
                ", ".join(
                    f"{k} {1000 * closest.metrics.get(k, math.inf):.1f} ms > {1000 * v:.1f} ms"
                    for k, v in result.slo.items()
                    if closest.metrics.get(k, math.inf) > v
                )
                or f"{closest.failed} requests failed"
            )
            lines.append(f"closest: {closest.replicas} x {c.describe()}: {misses}")
    lines.append(f"report: {folder / 'plan.json'}")
    return "\n".join(lines)


def _progress_line(total: int) -> Callable[[planning.CandidateResult], None]:
    """A line on stderr as each candidate is searched: which, and what it came to."""
    count = 0

    def tell(result: planning.CandidateResult) -> None:
        nonlocal count
        count += 1
        c = result.candidate
        if result.skipped:
            verdict = f"skipped: {result.skipped}"
        elif result.passing is not None:
            p = result.passing
            verdict = f"meets the SLO with {p.replicas} replicas (${p.cost_per_hour:.2f}/h)"
        else:
            most = max((p.replicas for p in result.points), default=0)
            verdict = f"misses the SLO up to {most} replicas"
        print(f"vllm-sim plan: {count}/{total} {c.describe()}: {verdict}", file=sys.stderr)

    return tell


def _profile_warnings(path: str | None, gpus: list[str], spec_file: str) -> None:
    """A --timing-profile fitted on another GPU applies to every candidate all the same:
    said once per GPU here, rather than by every worker."""
    if not path:
        return
    from vllm_sim.config.gpu import resolve_gpu
    from vllm_sim.config.timing_profile import load_timing_profile

    profile = load_timing_profile(path)  # ValueError: a one-line refusal
    for name in gpus:
        try:
            warning = profile.gpu_warning(resolve_gpu(name, spec_file))
        except ValueError:
            continue  # an unknown GPU: its candidates are skipped with the reason
        if warning is not None:
            print(f"vllm-sim plan: warning: {warning}", file=sys.stderr)


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--gpu names no GPU")
    return names


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, not {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag} must list positive integers")
    if max(values) > MAX_CHOICE or len(values) > MAX_CHOICES:
        raise ValueError(f"{flag} lists at most {MAX_CHOICES} values, each at most {MAX_CHOICE}")
    return values


# A CPU KV tier per replica, GiB: up to what a large host holds.
MAX_OFFLOAD_GIB = 16384.0


def _sizes(text: str) -> list[float]:
    """--kv-offloading-size-choices: GiB sizes, 0 for none; ValueError naming the flag."""
    flag = "--kv-offloading-size-choices"
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers of GiB, not {text!r}") from None
    if not values or len(values) > MAX_CHOICES:
        raise ValueError(f"{flag} lists 1 to {MAX_CHOICES} sizes")
    if any(not math.isfinite(v) or not 0 <= v <= MAX_OFFLOAD_GIB for v in values):
        raise ValueError(f"{flag}: each size must be between 0 and {MAX_OFFLOAD_GIB:g} GiB")
    return list(dict.fromkeys(values))


def _costs(text: str) -> dict[str, float]:
    costs = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        try:
            cost = float(value)
        except ValueError:
            cost = -1.0
        if not sep or not math.isfinite(cost) or cost <= 0:
            raise ValueError(f"--gpu-cost {part!r}: expected GPU=DOLLARS, a positive number")
        costs[name.strip()] = cost
    return costs
