"""11. Instructions per request: callgrind's count of what the server executes for one
request, this commit's code beside an earlier commit's (HEAD~1 unless --base says), in one
run.

Each kind of request runs through a whole instance in-process (bench/request_loop.py:
the HTTP parser, the application, the pipeline, the engine, the answer's bytes) under
valgrind's callgrind, which counts only the measured requests (a marker library toggles
it after the warm-up). Instruction counts do not depend on the machine's load: the same
code gives the same count within about 0.1%, so a change of 3% is a real one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import report
from bench.options import Options
from bench.report import BenchReport, Figure, Unavailable
from bench.request_loop import MARKER_ENV

NAME = "instructions"
KINDS = ("chat", "completion", "stream")
ROOT = Path(__file__).resolve().parent.parent
_MARKER_C = "#include <valgrind/callgrind.h>\nvoid toggle(void) { CALLGRIND_TOGGLE_COLLECT; }\n"
_COLLECTED = re.compile(r"Collected : (\d+)")


def _marker(folder: Path) -> Path:
    """The toggle library, compiled here; Unavailable without valgrind or a C compiler."""
    if shutil.which("valgrind") is None:
        raise Unavailable("valgrind is not installed")
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise Unavailable("no C compiler for callgrind's marker")
    source, library = folder / "marker.c", folder / "marker.so"
    source.write_text(_MARKER_C)
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise Unavailable(f"cannot build callgrind's marker: {built.stderr.strip()[:200]}")
    return library


def _per_request(kind: str, count: int, marker: Path, src: Path, out: Path) -> float:
    """Instructions one request of `kind` costs with the package under `src`."""
    env = {
        **os.environ,
        MARKER_ENV: str(marker),
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)]),
    }
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "bench.request_loop",
        kind,
        str(count),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=ROOT)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise Unavailable(f"{kind} under callgrind failed: {' '.join(tail)[:200]}")
    return int(found.group(1)) / count


def _commit(rev: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _checkout(rev: str, folder: Path) -> Path | None:
    """A detached work tree of `rev` (its package's source folder), or None."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), rev],
        capture_output=True,
        check=False,
    )
    return folder / "src" if done.returncode == 0 else None


def _drop_checkout(folder: Path) -> None:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)],
        capture_output=True,
        check=False,
    )


def run(opts: Options) -> BenchReport:
    count = 300 if opts.quick else 1000
    head, base = _commit("HEAD") or "this tree", _commit(opts.base)
    title = (
        f"11. Instructions per request (callgrind, {count} requests after a warm-up, "
        f"in-process): {head} against {base or opts.base}"
    )
    rep = BenchReport(NAME, title)
    with tempfile.TemporaryDirectory(prefix="vllm-sim-instructions-") as tmp:
        folder = Path(tmp)
        marker = _marker(folder)
        base_src = _checkout(opts.base, folder / "base") if base else None
        try:
            for kind in KINDS:
                now = _per_request(kind, count, marker, ROOT / "src", folder / "now.out")
                before = 0.0
                if base_src is not None:
                    try:
                        before = _per_request(kind, count, marker, base_src, folder / "b.out")
                    except Unavailable as error:
                        rep.problems.append(f"{opts.base}: {error}")
                rep.figures.append(Figure(NAME, f"{kind} instr/request", now, before, False))
        finally:
            if base_src is not None:
                _drop_checkout(folder / "base")
    if base is None:
        rep.problems.append(f"{opts.base} is not a commit here: no figures to compare with")
    return rep


def show(rep: BenchReport) -> None:
    rows = [
        [
            f.metric.split()[0],
            f"{f.sim:,.0f}",
            f"{f.base:,.0f}" if f.base else "-",
            f"{(f.ratio - 1) * 100:+.1f}%" if f.base else "-",
        ]
        for f in rep.figures
    ]
    print(report.table(["request", "this commit", "base", "change"], rows))
