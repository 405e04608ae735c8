"""`vllm-sim replay` and `vllm-sim compare`: the what-if commands (plan: plan_cli.py).

    vllm-sim replay TRACE [replay options] [server flags]
    vllm-sim compare A B

Every flag replay does not know is a server flag (`--model`, `--gpu`, `--timing-model`,
`--max-num-seqs`, a `--config` YAML file, ...), read exactly as the server reads them:
the simulated instances are the server's own engines.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from vllm_sim.config import ConfigError, HelpRequested, load_startup
from vllm_sim.whatif.arguments import (
    OneLineParser,
    bounded_float,
    bounded_int,
    flag_value,
    offline_config,
    positive_float,
    positive_int,
)
from vllm_sim.whatif.interrupts import Interrupts
from vllm_sim.whatif.origin import run_origin
from vllm_sim.whatif.outdir import OutFolder, OutFolderError
from vllm_sim.whatif.output import RequestStream, write_run
from vllm_sim.whatif.prompts import SMALLEST_VOCABULARY, VOCABULARY_SPAN
from vllm_sim.whatif.results import MAX_SAMPLES, RunResult
from vllm_sim.whatif.routers import ROUTERS
from vllm_sim.whatif.trace import TRACE_FORMATS, Trace, TraceError, read_trace

REPLAY_USAGE = "vllm-sim replay TRACE [options] [server flags]"
MAX_INSTANCES = 1024  # a fleet's replay holds every instance's engine in one process
MIN_SAMPLE_INTERVAL = 0.001


def replay_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="vllm-sim replay",
        usage=REPLAY_USAGE,
        description=(
            "Runs a request trace through simulated vLLM instances in simulated time (no "
            "HTTP, no waiting), or with --target sends it to a live server, and writes the "
            "report. Flags not listed here are server flags."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("trace", type=Path, help="Mooncake JSONL, CSV, or OpenAI-request JSONL")
    parser.add_argument(
        "--instances",
        type=bounded_int(1, MAX_INSTANCES),
        default=1,
        help=f"simulated instances (default 1, at most {MAX_INSTANCES})",
    )
    parser.add_argument(
        "--router", choices=ROUTERS, default="round-robin", help="how requests pick an instance"
    )
    parser.add_argument(
        "--prefill-instances",
        type=bounded_int(1, MAX_INSTANCES),
        help="with --router pd: how many of the instances prefill (default half)",
    )
    parser.add_argument(
        "--format",
        choices=TRACE_FORMATS,
        default="auto",
        dest="trace_format",
        help="the trace's format (default: from the file)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("replay-out"),
        help="the output folder (default replay-out)",
    )
    parser.add_argument("--strict", action="store_true", help="stop at the first bad trace line")
    parser.add_argument("--limit", type=positive_int, help="replay the first N requests only")
    parser.add_argument(
        "--rate", type=positive_float, help="arrivals a second for requests without a timestamp"
    )
    parser.add_argument(
        "--sample-interval",
        type=bounded_float(MIN_SAMPLE_INTERVAL, 86400.0),
        default=1.0,
        help=f"seconds between two samples of the fleet (default 1, at least "
        f"{MIN_SAMPLE_INTERVAL:g}; a run keeps at most {MAX_SAMPLES:,} samples, widening "
        "the interval as it goes past them)",
    )
    parser.add_argument(
        "--no-plots", action="store_true", help="no PNG pictures (the HTML report keeps its tables)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--target", help="a live OpenAI-compatible server's URL: replay over HTTP on the wall clock"
    )
    parser.add_argument(
        "--vocab-size",
        type=positive_int,
        default=VOCABULARY_SPAN,
        help="prompt token ids of traces given as lengths stay below this (the target "
        f"model's vocabulary; default {VOCABULARY_SPAN}, at least {SMALLEST_VOCABULARY})",
    )
    parser.add_argument(
        "--speedup",
        type=positive_float,
        default=1.0,
        help="with --target: send the trace this many times faster",
    )
    return parser


def replay_main(argv: Sequence[str]) -> int:
    parser = replay_parser()
    args, server_flags = parser.parse_known_args(list(argv))
    args.argv = list(argv)
    if args.vocab_size < SMALLEST_VOCABULARY:
        print(
            f"vllm-sim replay: --vocab-size must be at least {SMALLEST_VOCABULARY}", file=sys.stderr
        )
        return 2
    try:
        out = OutFolder.prepare(args.out)  # before any compute: a bad --out is one line
    except OutFolderError as error:
        print(f"vllm-sim replay: {error}", file=sys.stderr)
        return 2
    with Interrupts() as interrupts:
        try:
            return _replay(args, server_flags, out, interrupts)
        except KeyboardInterrupt:
            out.discard()
            print(
                f"vllm-sim replay: interrupted ({interrupts.name}); nothing written",
                file=sys.stderr,
            )
            return interrupts.exit_status


def _replay(
    args: argparse.Namespace, server_flags: list[str], out: OutFolder, interrupts: Interrupts
) -> int:
    stream: RequestStream | None = None
    done = False
    try:
        try:
            trace = read_trace(args.trace, args.trace_format, args.strict, args.rate, args.limit)
        except TraceError as error:
            print(f"vllm-sim replay: {error}", file=sys.stderr)
            return 2
        for problem in trace.problems[:20]:
            print(f"vllm-sim replay: skipped {problem}", file=sys.stderr)
        if len(trace.problems) > 20:
            print(
                f"vllm-sim replay: skipped {len(trace.problems) - 20} more lines", file=sys.stderr
            )
        stream = RequestStream(out)
        with _progress(len(trace.requests), args.quiet) as progress:
            try:
                result = _run(args, server_flags, trace, progress, stream, interrupts)
            except (ConfigError, ValueError) as error:
                print(f"vllm-sim replay: {error}", file=sys.stderr)
                return 2
        result.origin = run_origin("replay", args.argv, args.trace)
        try:
            # A partial result is written at once: no pictures (matplotlib takes seconds).
            _write(result, out, not args.no_plots and not result.partial, stream)
        except OSError as error:
            print(f"vllm-sim replay: cannot write {args.out}: {error.strerror}", file=sys.stderr)
            return 2
        done = True
    finally:
        if not done:
            if stream is not None:
                stream.abandon()
            out.discard()
    out.close()
    print(_summary_text(result, args.out))
    if result.partial:
        print(
            f"vllm-sim replay: interrupted ({interrupts.name}) at {result.stopped_at or 0.0:.1f} s "
            f"of simulated time: wrote a partial result ({result.summary.completed} of "
            f"{result.trace_requests} requests completed) to {args.out}",
            file=sys.stderr,
        )
        return interrupts.exit_status
    return 0


def _run(
    args: argparse.Namespace,
    flags: list[str],
    trace: Trace,
    progress: Callable[[int], None],
    stream: RequestStream,
    interrupts: Interrupts,
) -> RunResult:
    if args.target:
        from vllm_sim.whatif.http_replay import HttpReplay

        model = flag_value(flags, "--served-model-name") or flag_value(flags, "--model")
        return HttpReplay(
            args.target,
            trace,
            args.speedup,
            model,
            args.sample_interval,
            progress=progress,
            vocabulary=args.vocab_size,
        ).run()
    from vllm_sim.whatif.simulation import Replay

    try:
        cfg = offline_config(load_startup(flags, os.environ).config, flags)
    except HelpRequested:
        raise ConfigError("server flags cannot ask for --help here: see vllm-sim --help") from None
    tokenizer = None
    if any(r.body is not None for r in trace.requests):
        from vllm_sim.server.tokenizer_setup import choose_tokenizer

        tokenizer = choose_tokenizer(cfg, os.environ).tokenizer
    replay = Replay(
        cfg,
        trace,
        args.instances,
        args.router,
        args.sample_interval,
        tokenizer=tokenizer,
        progress=progress,
        prefill_instances=args.prefill_instances,
        vocabulary=args.vocab_size,
        on_record=stream.write,
    )
    for warning in replay.timing.warnings if replay.timing is not None else ():
        print(f"vllm-sim replay: warning: {warning}", file=sys.stderr)
    with interrupts.stopping(replay.interrupt):
        return replay.run()


def _write(result: RunResult, out: OutFolder, plots: bool, stream: RequestStream) -> None:
    from vllm_sim.whatif.report import PLOTS, write_html, write_plots

    write_run(result, out, stream)
    pictures = write_plots(result, out) if plots else []
    if not pictures:
        for name in PLOTS:
            out.remove(name)  # an earlier run's pictures are not this run's
    write_html(result, out, pictures)


def _failures_line(result: RunResult) -> str | None:
    """The first line of the summary when any request failed: how many, and why."""
    failed = [r for r in result.records if not r.ok]
    if not failed:
        return None
    reasons = Counter(
        r.error
        if r.error in ("interrupted", "unfinished")
        else "refused"  # never scheduled: refused on arrival (a full queue, a bad request)
        if r.queue_time is None and r.ttft is None
        else "failed"
        for r in failed
    )
    others = Counter(
        r.error or "no answer" for r in failed if r.error not in ("interrupted", "unfinished")
    )
    parts = ", ".join(f"{n} {why}" for why, n in reasons.most_common())
    common = ""
    if others:
        text, n = others.most_common(1)[0]
        text = text if len(text) <= 120 else text[:117] + "..."
        common = f"; most common: {text!r} ({n})"
    return (
        f"WARNING: {len(failed)} of {len(result.records)} requests did not complete "
        f"({parts}){common}; see requests.csv"
    )


def _summary_text(result: RunResult, folder: Path) -> str:
    s = result.summary
    lines = []
    failures = _failures_line(result)
    if failures is not None:
        lines.append(failures)
    if result.partial:
        lines.append(
            f"PARTIAL RESULT: the run was interrupted at {result.stopped_at or 0.0:.1f} s of "
            f"simulated time; {s.requests} of {result.trace_requests} trace requests had arrived"
        )
    lines += [
        f"{s.requests} requests: {s.completed} completed, {s.failed} failed, "
        f"over {s.duration:.2f} s (run in {result.wall_seconds:.2f} s, "
        f"{s.duration / max(result.wall_seconds, 1e-9):.0f}x real time)",
        f"throughput {s.request_throughput:.3f} req/s, {s.output_throughput:.1f} output tok/s; "
        f"prefix cache hit rate {100 * s.prefix_cache_hit_rate:.1f}%; preemptions {s.preemptions}; "
        f"max running {s.max_running}, max waiting {s.max_waiting}",
    ]
    for name, dist in s.latencies.items():
        if dist is not None:
            lines.append(
                f"{name:>10}: mean {1000 * dist.mean:.1f} ms, p50 {1000 * dist.p50:.1f}, "
                f"p90 {1000 * dist.p90:.1f}, p99 {1000 * dist.p99:.1f}"
            )
    lines.append(f"report: {folder / 'report.html'}")
    return "\n".join(lines)


class _progress:
    """A progress bar on stderr when it is a terminal (tqdm), else nothing."""

    def __init__(self, total: int, quiet: bool) -> None:
        self._bar = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="req", mininterval=0.5, file=sys.stderr)

    def __enter__(self) -> Callable[[int], None]:
        bar = self._bar
        return (lambda n: None) if bar is None else bar.update

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def compare_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-sim compare",
        description="Two runs' means side by side (result.json files or their folders).",
    )
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args(list(argv))
    from vllm_sim.whatif.compare import compare

    try:
        print(compare(args.first, args.second))
    except ValueError as error:
        print(f"vllm-sim compare: {error}", file=sys.stderr)
        return 2
    return 0
