"""The container's health check: GET /health on the port the running simulator serves.

A container's HEALTHCHECK runs beside the server and does not see its arguments, so this
reads them from the server's own command line (PID 1 in a container) and loads them the way
the server did: the port and TLS come from flags or from a `--config` YAML file alike.
Exit status 0 means healthy, 1 unhealthy (what Docker expects).

    python -m vllm_sim.tools.healthcheck [--pid N] [-- SERVER ARGS...]
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from vllm_sim.config.errors import ConfigError, HelpRequested
from vllm_sim.config.load import load_config

# Names the simulator is started by; everything after one of them is its arguments.
_PROGRAMS = frozenset({"vllm-sim", "vllm", "llm-d-inference-sim"})
_TIMEOUT_S = 3.0


def server_arguments(cmdline: Sequence[str]) -> list[str]:
    """The simulator's own arguments in a full command line (interpreter and script first)."""
    for index, item in enumerate(cmdline):
        if os.path.basename(item) in _PROGRAMS:
            return list(cmdline[index + 1 :])
        if item == "-m" and index + 1 < len(cmdline) and cmdline[index + 1] == "vllm_sim":
            return list(cmdline[index + 2 :])
    return []


def read_cmdline(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0") if part]


def health_url(arguments: Sequence[str], environ: Mapping[str, str]) -> str:
    config = load_config(arguments, environ)
    scheme = "https" if config.ssl_certfile else "http"
    host = config.host if config.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{config.port}/health"


def probe(url: str) -> bool:
    # The certificate is the server's own, checked on loopback: trust is not the question.
    context = None
    if url.startswith("https"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S, context=context) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pid = 1
    if args[:1] == ["--pid"] and len(args) > 1:
        pid, args = int(args[1]), args[2:]
    arguments = args[1:] if args[:1] == ["--"] else server_arguments(read_cmdline(pid))
    try:
        url = health_url(arguments, os.environ)
    except (ConfigError, HelpRequested) as exc:
        print(f"healthcheck: cannot read the server's settings: {exc}", file=sys.stderr)
        return 1
    healthy = probe(url)
    if not healthy:
        print(f"healthcheck: {url} did not answer 200", file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
