"""Real-world `vllm serve` command lines (tests/support/vllm_serve_lines.txt), each with its
source and, when vLLM 0.32 rejects it, vLLM's error."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

LINES_FILE = Path(__file__).with_name("vllm_serve_lines.txt")
_REJECTED = "# rejected by vLLM 0.32: "
_EXIT_CODE = re.compile(r" \(exit code \d+\)$")


@dataclass(frozen=True)
class ServeLine:
    text: str
    source: str
    rejected: str | None  # vLLM's error text when vLLM 0.32 refuses the line

    @property
    def argv(self) -> list[str]:
        """The arguments after `vllm`, starting with `serve`, as a shell splits them."""
        return shlex.split(self.text)[1:]

    @property
    def id(self) -> str:
        return " ".join(self.argv[1:3])[:60]


def serve_lines() -> list[ServeLine]:
    lines: list[ServeLine] = []
    for raw in LINES_FILE.read_text(encoding="utf-8").splitlines():
        if raw.startswith("vllm serve"):
            lines.append(ServeLine(raw, "", None))
        elif raw.startswith("# source: ") and lines:
            lines[-1] = ServeLine(lines[-1].text, raw.removeprefix("# source: "), None)
        elif raw.startswith(_REJECTED) and lines:
            error = _EXIT_CODE.sub("", raw.removeprefix(_REJECTED))
            lines[-1] = ServeLine(lines[-1].text, lines[-1].source, error)
    return lines


def accepted_lines() -> list[ServeLine]:
    return [line for line in serve_lines() if line.rejected is None]


def rejected_lines() -> list[ServeLine]:
    return [line for line in serve_lines() if line.rejected is not None]
