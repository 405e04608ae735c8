"""`python -m conformance`: sets up the oracle if needed, starts real vLLM and the simulator,
sends every case to both, compares, writes .conformance/report.{md,json} and the raw answers
(.conformance/exchanges/), and exits 1 when a difference is not accepted (2 when a server
could not be set up or started)."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from fnmatch import fnmatchcase
from pathlib import Path

from conformance.accepted import classify, load_accepted
from conformance.case import Case
from conformance.cases import CASES, CHAT, CHAT_PATH
from conformance.client import send
from conformance.compare import Exchange, body_kind, compare
from conformance.oracle import (
    ORACLE_ENV,
    VLLM_VERSION,
    Layout,
    Profile,
    ensure_oracle,
    oracle_argv,
    say,
    simulator_argv,
)
from conformance.report import CaseResult, RunInfo, render_json, render_markdown
from conformance.servers import HOST, Server, attach, start, stop, wait_ready
from conformance.sse import parse_sse

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("--python", default="python3", help="interpreter for the oracle's venv")
    parser.add_argument("--cache", type=Path, default=REPO / ".conformance")
    parser.add_argument("--only", action="append", default=[], help="case name pattern")
    parser.add_argument("--setup-only", action="store_true", help="install the oracle and stop")
    parser.add_argument("--oracle-timeout", type=float, default=600.0)
    parser.add_argument(
        "--oracle-port", type=int, help="use a vLLM already serving tiny-model on this port"
    )
    return parser.parse_args(argv)


def selected(patterns: list[str]) -> list[Case]:
    if not patterns:
        return CASES
    return [c for c in CASES if any(fnmatchcase(c.name, p) for p in patterns)]


def save_exchange(folder: Path, name: str, side: str, exchange: Exchange) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    head = [f"status: {exchange.status}", *(f"{k}: {v}" for k, v in exchange.headers.items())]
    if exchange.error:
        head.append(f"error: {exchange.error}")
    text = "\n".join(head).encode() + b"\n\n" + exchange.body
    (folder / f"{name}.{side}.txt").write_bytes(text)


def run_cases(cases: list[Case], oracle: Server, sim: Server, folder: Path) -> list[CaseResult]:
    # One request first, not compared: the oracle's first generation pays for warm-up.
    warm = Case("warm-up", CHAT_PATH, method="POST", body=CHAT)
    send(warm, HOST, oracle.port)
    send(warm, HOST, sim.port)
    results = []
    for case in cases:
        left = send_oracle(case, oracle)
        right = send(case, HOST, sim.port)
        save_exchange(folder, case.name, "vllm", left)
        save_exchange(folder, case.name, "sim", right)
        results.append(CaseResult(case, left, right, compare(case, left, right)))
    return results


def event_count(exchange: Exchange) -> int:
    return len(parse_sse(exchange.body)[0]) if body_kind(exchange) == "sse" else 0


def send_oracle(case: Case, oracle: Server, tries: int = 3) -> Exchange:
    """vLLM merges the tokens of several engine steps into one chunk when its API server
    falls behind the engine, which a model this small and fast sometimes makes happen: a
    stream is asked for up to `tries` times, and the answer with the most events (the
    closest to one chunk per token) is kept."""
    best = send(case, HOST, oracle.port)
    for _ in range(tries - 1):
        if body_kind(best) != "sse":
            break
        again = send(case, HOST, oracle.port)
        if event_count(again) > event_count(best):
            best = again
    return best


def start_servers(
    layout: Layout, args: argparse.Namespace, profile: Profile
) -> tuple[Server, Server]:
    """Both servers set up for `profile`; --oracle-port stands for the plain profile's vLLM."""
    logs = layout.root / "logs"
    suffix = "" if profile == "plain" else f"-{profile}"
    if args.oracle_port and profile == "plain":
        oracle = attach("vLLM", args.oracle_port)
    else:
        argv = oracle_argv(layout, profile)
        oracle = start(f"vLLM{suffix}", argv, logs / f"vllm{suffix}.log", env=ORACLE_ENV)
    model = layout.served_model(profile)
    sim_argv = simulator_argv(REPO, model, profile)
    sim = start(f"vllm-sim{suffix}", sim_argv, logs / f"sim{suffix}.log")
    try:
        wait_ready(sim, 60)
        wait_ready(oracle, args.oracle_timeout)
    except BaseException:
        stop(oracle)
        stop(sim)
        raise
    return oracle, sim


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    layout = Layout(args.cache.resolve(), REPO)
    info = RunInfo(VLLM_VERSION, time.strftime("%Y-%m-%d %H:%M:%S"))
    clock = time.monotonic()
    try:
        ensure_oracle(layout, args.python)
    except RuntimeError as error:
        say(f"the oracle could not be set up: {error}")
        return 2
    info.seconds["setup"] = time.monotonic() - clock
    if args.setup_only:
        return 0
    cases = selected(args.only)
    folder = layout.root / "exchanges"
    shutil.rmtree(folder, ignore_errors=True)
    results: list[CaseResult] = []
    for profile in dict.fromkeys(case.profile for case in cases):
        try:
            results += run_profile(layout, args, info, [c for c in cases if c.profile == profile])
        except RuntimeError as error:
            say(str(error))
            return 2
    return finish(layout, info, results)


def run_profile(
    layout: Layout, args: argparse.Namespace, info: RunInfo, cases: list[Case]
) -> list[CaseResult]:
    """Starts both servers as `cases`' profile needs, sends the cases, stops them."""
    profile = cases[0].profile
    clock = time.monotonic()
    say(f"starting vLLM and vllm-sim ({profile} profile)")
    oracle, sim = start_servers(layout, args, profile)
    info.seconds[f"start ({profile})"] = time.monotonic() - clock
    for server in (oracle, sim):
        info.commands[server.name] = shlex.join(server.argv)
    clock = time.monotonic()
    try:
        return run_cases(cases, oracle, sim, layout.root / "exchanges")
    finally:
        stop(oracle)
        stop(sim)
        info.seconds[f"requests ({profile})"] = time.monotonic() - clock


def finish(layout: Layout, info: RunInfo, results: list[CaseResult]) -> int:
    entries = load_accepted(REPO / "conformance" / "accepted.toml")
    # With --only, entries about cases that did not run are not stale.
    ran = [e for e in entries if any(fnmatchcase(r.case.name, e.case) for r in results)]
    verdict = classify([d for r in results for d in r.differences], ran)
    markdown = render_markdown(info, results, verdict)
    (layout.root / "report.md").write_text(markdown, encoding="utf-8")
    (layout.root / "report.json").write_text(render_json(info, results, verdict), "utf-8")
    print(markdown)
    say(f"report: {layout.root / 'report.md'} and report.json")
    return 1 if verdict.unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
