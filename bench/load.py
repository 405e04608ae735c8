"""Runs a load client in its own process (pinned to CPU 1) against started servers: the
HTTP one (bench/client.py) or the gRPC one (bench/grpc_client.py), by the spec given."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import msgspec

from bench.servers import ROOT, Server
from bench.spec import GrpcSpec, LoadResult, LoadSpec

_SLACK = 60.0  # seconds beyond the planned run before the client is given up on
SETTLE = 0.3  # seconds between two load runs, for the server to close the old connections


class LoadError(RuntimeError):
    pass


def run_load(spec: LoadSpec | GrpcSpec) -> LoadResult:
    client = "bench.grpc_client" if isinstance(spec, GrpcSpec) else "bench.client"
    argv = [sys.executable, "-m", client, msgspec.json.encode(spec).decode()]
    timeout = spec.warmup + spec.duration + spec.drain_timeout + _SLACK
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LoadError(f"load client did not finish within {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise LoadError(f"load client failed ({done.returncode}):\n{done.stderr.decode()}")
    return msgspec.json.decode(done.stdout, type=LoadResult)


def measure(server: Server, spec: LoadSpec | GrpcSpec) -> LoadResult:
    """One load run against a started server; notes it if the server died meanwhile."""
    time.sleep(SETTLE)
    result = run_load(msgspec.structs.replace(spec, port=server.port, server_pid=server.pid))
    if not server.alive():
        server.problems.append("server process died during the load run")
    return result


@contextlib.contextmanager
def running(servers: Sequence[Server]) -> Iterator[None]:
    """Starts every server (an idle one costs no CPU) and stops them all at the end."""
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.enter_context(server)
        yield


def alternate(servers: Sequence[Server], spec: LoadSpec, rounds: int) -> list[list[LoadResult]]:
    """Loads each started server in turn, `rounds` times; the results of each server.

    Alternating spreads the noise of a shared machine over every server alike.
    """
    results: list[list[LoadResult]] = [[] for _ in servers]
    for _ in range(rounds):
        for server, mine in zip(servers, results, strict=True):
            mine.append(measure(server, spec))
    return results
