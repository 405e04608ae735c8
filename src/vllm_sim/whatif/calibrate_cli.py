"""`vllm-sim calibrate`: the step model's coefficients fitted to a real vLLM run's
measurements, written as a timing profile that --timing-profile loads (see calibrate.py).

    vllm-sim calibrate MEASUREMENTS [options] [server flags]

Flags calibrate does not know are server flags describing the measured server (`--model`,
`--gpu`, `--tensor-parallel-size`, `--max-num-seqs`, ...), read exactly as the server
reads them; --timing-model is roofline. Anything that makes the data or the flags unusable
is refused with one line and status 2 before any replay; Ctrl-C stops with status 130 and
leaves nothing written.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from vllm_sim.config import Config, ConfigError, HelpRequested, load_startup
from vllm_sim.config.timing_profile import load_timing_profile, profile_text
from vllm_sim.whatif.arguments import positive_int
from vllm_sim.whatif.calibrate import (
    BOUNDS,
    DEFAULT_FIT,
    MIN_REQUESTS,
    WEAK,
    Calibration,
    Errors,
    FitResult,
    parse_fit,
    split,
)
from vllm_sim.whatif.measurements import (
    MEASUREMENT_FORMATS,
    MeasurementError,
    Measurements,
    read_measurements,
)

PROG = "vllm-sim calibrate"
CALIBRATE_USAGE = f"{PROG} MEASUREMENTS [options] [server flags]"


class _Refusal(Exception):
    """One line for stderr, then status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, as every other refusal of the command.
        print(f"{PROG}: {message} (usage: {CALIBRATE_USAGE})", file=sys.stderr)
        raise SystemExit(2)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < 0.9 + 1e-12:
        raise argparse.ArgumentTypeError("must be a fraction from 0 to 0.9")
    return value


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def calibrate_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        usage=CALIBRATE_USAGE,
        description=(
            "Fits the roofline step model's coefficients to measurements of a real vLLM run "
            "(replaying the measured requests through the simulated server each time) and "
            "writes a timing profile for --timing-profile. Flags not listed here are server "
            "flags describing the measured server (--model, --gpu, --tensor-parallel-size, "
            "--max-num-seqs, --max-num-batched-tokens, --num-gpu-blocks-override, ...)."
        ),
        epilog=(
            "Unusable measurements, flags or --out are refused with one line and status 2 "
            "before any replay; Ctrl-C stops with status 130, and nothing is written but "
            "the profile, whole."
        ),
        allow_abbrev=False,
    )
    parser.add_argument(
        "measurements",
        type=Path,
        help="a vllm bench serve --save-result --save-detailed JSON, a per-request JSONL or "
        "CSV (arrival or queued, first- and last-token times, token counts), or /metrics "
        "scrapes ('# scrape <unix seconds>' before each)",
    )
    parser.add_argument(
        "--format",
        choices=MEASUREMENT_FORMATS,
        default="auto",
        dest="measurement_format",
        help="the measurements' layout (default: from the file)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        default=Path("timing-profile.yaml"),
        help="the profile to write (default timing-profile.yaml); nothing else is written",
    )
    others = [name for name in BOUNDS if name not in DEFAULT_FIT]
    parser.add_argument(
        "--fit",
        metavar="COEFF,...",
        default=",".join(DEFAULT_FIT),
        help=f"the coefficients to fit, comma-separated (default {', '.join(DEFAULT_FIT)}; "
        f"also {', '.join(others)})",
    )
    parser.add_argument(
        "--holdout",
        metavar="F",
        type=_fraction,
        default=0.0,
        help="hold this share of the requests out of the fit (a seeded random draw) and "
        "report the error on them (default 0: fit on all)",
    )
    parser.add_argument(
        "--fit-seed",
        metavar="N",
        type=_seed,
        default=0,
        help="seeds the holdout draw and arrivals rebuilt from a request rate (default 0)",
    )
    parser.add_argument(
        "--workers",
        metavar="N",
        type=positive_int,
        help="processes replaying a step's variations at once (default: one per coefficient, "
        "at most one per core)",
    )
    parser.add_argument(
        "--max-iterations",
        metavar="N",
        type=positive_int,
        default=30,
        help="replays the optimiser may ask for, besides its derivatives (default 30)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def calibrate_main(argv: Sequence[str]) -> int:
    try:
        return _calibrate(argv)
    except _Refusal as refusal:
        print(f"{PROG}: {refusal}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
        return 130


def _calibrate(argv: Sequence[str]) -> int:
    args, server_flags = calibrate_parser().parse_known_args(list(argv))
    try:
        names = parse_fit(args.fit)
    except ValueError as error:
        raise _Refusal(str(error)) from None
    out: Path = args.out
    _check_out(out)
    try:
        measured = read_measurements(args.measurements, args.measurement_format, args.fit_seed)
    except MeasurementError as error:
        raise _Refusal(str(error)) from None
    _check_thin(measured, args.holdout, args.fit_seed)
    cfg, description = _server(server_flags)
    start_profile = load_timing_profile(cfg.timing_profile) if cfg.timing_profile else None

    say = _say(args.quiet)
    print(_measured_text(measured))
    print(f"replayed on: {description}")
    workers = args.workers or max(1, min(len(names), os.cpu_count() or 1))
    calibration = Calibration(
        cfg,
        measured,
        names,
        args.holdout,
        args.fit_seed,
        os.environ,
        say,
        args.max_iterations,
        workers,
    )
    unit = calibration.targets.unit_name
    held = f"; {len(calibration.holdout_set)} held out" if calibration.holdout_set else ""
    print(f"fitting {', '.join(names)} on {len(calibration.fit_set)} {unit}{held}")
    result = calibration.run()
    if result.refused:
        if len(result.refused) >= len(measured.workload):
            raise _Refusal(f"the simulated server ran none of the requests: {result.refused[0]}")
        print(
            f"{PROG}: {len(result.refused)} measured requests could not run in the simulated "
            f"server (first: {result.refused[0]}); left out of the fit",
            file=sys.stderr,
        )
    print(_result_text(result, unit))
    coefficients = dict(start_profile.coefficients) if start_profile is not None else {}
    coefficients.update({name: result.after[name] for name in result.fitted})
    details = _details(cfg, measured, result, args, unit)
    header = (
        "vllm-sim timing profile, written by `vllm-sim calibrate`: the roofline step model's\n"
        "coefficients fitted to a real vLLM run. Load it with --timing-model roofline\n"
        f"--timing-profile {out.name} (the server, replay and plan)."
    )
    text = profile_text({k: float(f"{v:.6g}") for k, v in coefficients.items()}, details, header)
    try:
        write_atomically(out, text)
    except OSError as error:
        raise _Refusal(f"cannot write {out}: {error.strerror or error}") from None
    print(f"wrote {out} (use it with --timing-model roofline --timing-profile {out})")
    return 0


def _check_out(out: Path) -> None:
    if out.is_dir():
        raise _Refusal(f"--out {out} is a folder: give the profile's file name")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise _Refusal(f"--out {out}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise _Refusal(f"--out {out}: the folder {folder} is not writable")
    probe = folder / f".{out.name}.{os.getpid()}.probe"
    try:  # a read-only mount, or a folder root may not write either: found before the fit
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0))
        os.close(fd)
        probe.unlink()
    except OSError as error:
        raise _Refusal(
            f"--out {out}: the folder {folder} is not writable: {error.strerror or error}"
        ) from None


def _check_thin(measured: Measurements, holdout: float, seed: int) -> None:
    usable = measured.fittable
    if usable < MIN_REQUESTS:
        raise _Refusal(f"too thin to fit: {usable} requests, need {MIN_REQUESTS}")
    if holdout and not measured.windows:
        fit_set, _ = split(len(measured.requests), holdout, seed)
        kept = sum(1 for i in fit_set if measured.requests[i].output_tokens >= 2)
        if kept < MIN_REQUESTS:
            raise _Refusal(
                f"too thin to fit: {kept} requests after holding out {holdout:g}, need "
                f"{MIN_REQUESTS}"
            )
    if measured.windows and sum(1 for w in measured.windows if w.ttft is not None) < 2:
        raise _Refusal("too thin to fit: fewer than 2 intervals between scrapes saw a request")


def _server(flags: Sequence[str]) -> tuple[Config, str]:
    """The measured server's configuration (roofline timing), and how it is timed."""
    from vllm_sim.server.step_timing import timed_config

    try:
        cfg = load_startup([*flags, "--timing-model", "roofline"], os.environ).config
        _, timing = timed_config(cfg, os.environ)
    except HelpRequested:
        raise _Refusal("server flags cannot ask for --help here: see vllm-sim --help") from None
    except ConfigError as error:
        raise _Refusal(f"invalid server flags: {error}") from None
    if cfg.phases is not None:
        raise _Refusal("--phases runs on a server's clock: a calibration replays none")
    assert timing is not None
    for warning in timing.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    return cfg, timing.description


def _say(quiet: bool) -> Callable[[str], None]:
    def say(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    return say


def write_atomically(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all: written beside it, then renamed over it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with partial.open("x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{1000 * value:.1f} ms"


def _measured_text(measured: Measurements) -> str:
    from vllm_sim.whatif.calibrate import targets_of

    means = targets_of(measured).measured()
    failed = f", {measured.failed} failed (left out)" if measured.failed else ""
    intervals = sum(1 for w in measured.windows if w.requests)
    unit = f" in {intervals} intervals" if measured.windows else ""
    return (
        f"measured: {measured.completed} requests completed{failed}{unit} over "
        f"{measured.duration:.2f} s ({measured.path.name}, {measured.format}; arrivals "
        f"{measured.arrivals})\n"
        f"  mean TTFT {_ms(means['ttft'])}, mean TPOT {_ms(means['tpot'])}, "
        f"mean E2E {_ms(means['e2e'])}"
    )


def _percent(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"


def _result_text(result: FitResult, unit: str) -> str:
    one = "interval" if unit == "intervals" else "request"
    rows: list[tuple[str, str, str]] = []
    for part, label in (("fit", "fit set"), ("holdout", "holdout")):
        if part not in result.errors_before:
            continue
        before, after = result.errors_before[part], result.errors_after[part]
        rows.append((f"{label}: {before.count} {unit}", "", ""))
        for name, attr, signed in (
            ("mean TTFT", "ttft_mean", True),
            ("mean TPOT", "tpot_mean", True),
            ("mean E2E", "e2e_mean", True),
            (f"median |TTFT error| of a {one}", "ttft_median", False),
            (f"median |TPOT error| of a {one}", "tpot_median", False),
        ):
            rows.append(
                (
                    f"  {name}",
                    _percent(getattr(before, attr), signed),
                    _percent(getattr(after, attr), signed),
                )
            )
    width = max(len(r[0]) for r in rows) + 2
    lines = [f"{'error (simulated / measured - 1)':<{width}}{'before':>9}{'after':>9}"]
    lines += [f"{a:<{width}}{b:>9}{c:>9}".rstrip() for a, b, c in rows]
    lines.append("coefficients (before -> after)")
    name_width = max(len(n) for n in result.asked) + 2
    for name in result.asked:
        line = f"  {name:<{name_width}}{result.before[name]:.4g} -> {result.after[name]:.4g}"
        moves = result.sensitivity.get(name)
        if moves is not None:
            ttft, tpot = moves
            line += f" (10% more: mean TTFT {_percent(ttft)}, mean TPOT {_percent(tpot)}"
            if max(abs(ttft), abs(tpot)) < WEAK:
                line += "; weakly pinned down by these measurements"
            line += ")"
        if name in result.kept:
            line += f" ({result.kept[name]})"
        lines.append(line)
    lines.append(
        f"{result.evaluations} replays, {result.iterations} iterations, "
        f"{result.seconds:.1f} s ({result.message})"
    )
    return "\n".join(lines)


def _details(
    cfg: Config, measured: Measurements, result: FitResult, args: argparse.Namespace, unit: str
) -> dict[str, Any]:
    from vllm_sim.server.step_timing import roofline_gpu

    gpu, _, _ = roofline_gpu(cfg)
    held = (
        f", {result.holdout_units} held out (fit seed {args.fit_seed})"
        if result.holdout_units
        else ""
    )
    source = (
        f"{measured.path.name} ({measured.format}, {measured.completed} requests; fit on "
        f"{result.fit_units} {unit}{held})"
    )

    def errors(table: dict[str, Errors]) -> dict[str, Any]:
        return {part: value.as_dict() for part, value in table.items()}

    return {
        "gpu": gpu.name,
        "model": cfg.model,
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "source": source,
        "fitted": list(result.fitted),
        "error_before": errors(result.errors_before),
        "error_after": errors(result.errors_after),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
