"""Truth under overload, through the real server: when the process writes its tokens later
than its engine released them, /metrics' TTFT, ITL and E2E are what the clients measured,
the output-lag gauges show by how much, and the log says the process cannot keep up; at a
load the process keeps up with, none of that.

The overloaded server is the real one whose event loop sleeps STALL after every engine
step, between the step's release and its writes (tests.support.stalled_server): a process
behind its engine by a known amount, whatever the machine. These tests measure wall-clock
time (they are `timing` tests): the clients run in threads of this process, and each
comparison allows 10% for what a busy 2-core machine adds on the client's side. The
requests go in waves, all of a wave at once on an idle server, so that none waits unread
in its socket behind a stall (a wait no server-side clock can see).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from tests.support.metrics import CHAT, E2E, ITL, TTFT, Metrics, Timed, chat, scrape, timed_stream
from tests.support.server import SimServer
from vllm_sim.metrics.lag import LAG, LAG_MAX, WARN_ABOVE

ROOT = Path(__file__).resolve().parents[3]
STALL = 0.040  # seconds the overloaded server sleeps between a step's release and writes
ARGS = ["--time-to-first-token", "200ms", "--inter-token-latency", "50ms", "--max-num-seqs", "16"]
TOKENS = 6
# Long enough for the lag's half-window (5 s) to end with writes after it: the warning is
# decided then.
RUN_SECONDS = 6.5
WARNING = "cannot keep up"


def stalled(stall: float) -> SimServer:
    server = SimServer(ARGS, env={"PYTHONPATH": str(ROOT)})
    server.command = [sys.executable, "-m", "tests.support.stalled_server", str(stall)]
    server.command += server.args
    return server


class Waves:
    """`streams` clients, each on its own keep-alive connection, sending one streamed chat
    at once per wave; waves follow each other after a pause in which the server is idle."""

    def __init__(self, sim: SimServer, streams: int) -> None:
        self.clients = [httpx.Client(base_url=sim.url, timeout=30) for _ in range(streams)]
        self.pool = ThreadPoolExecutor(streams)
        self.body = chat(max_tokens=TOKENS, stream=True, ignore_eos=True)
        self.answers: list[Timed] = []

    def wave(self) -> list[Timed]:
        answers = list(self.pool.map(lambda c: timed_stream(c, CHAT, self.body), self.clients))
        assert all(a.status == 200 and a.done and len(a.token_times) == TOKENS for a in answers)
        return answers

    def run(self, seconds: float) -> None:
        self.wave()  # connects every client: not measured
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            self.answers += self.wave()
            time.sleep(0.1)

    def close(self) -> None:
        self.pool.shutdown()
        for client in self.clients:
            client.close()

    def ttft(self) -> float:
        return _mean([a.token_times[0] for a in self.answers])

    def itl(self) -> float:
        gaps = [b - a for x in self.answers for a, b in pairwise(x.token_times)]
        return _mean(gaps)

    def e2e(self) -> float:
        return _mean([a.events[-1][0] for a in self.answers])


def _mean(values: list[float]) -> float:
    assert values
    return sum(values) / len(values)


def _mean_between(before: Metrics, after: Metrics, family: str) -> float:
    count = after.value(family + "_count") - before.value(family + "_count")
    assert count > 0
    return (after.value(family + "_sum") - before.value(family + "_sum")) / count


def _measure(sim: SimServer, streams: int) -> tuple[Waves, Metrics, Metrics]:
    waves = Waves(sim, streams)
    try:
        with httpx.Client(base_url=sim.url, timeout=30) as admin:
            waves.wave()  # the connections, and the server's first requests: not measured
            before = scrape(admin)
            waves.run(RUN_SECONDS)
            after = scrape(admin)
    finally:
        waves.close()
    return waves, before, after


@pytest.fixture(scope="module")
def overloaded() -> Iterator[tuple[SimServer, Waves, Metrics, Metrics]]:
    with stalled(STALL) as sim:
        yield (sim, *_measure(sim, 8))


@pytest.fixture(scope="module")
def keeping_up() -> Iterator[tuple[SimServer, Waves, Metrics, Metrics]]:
    with SimServer(ARGS) as sim:
        yield (sim, *_measure(sim, 4))


@pytest.mark.timing
def test_under_overload_metrics_report_what_the_clients_got(
    overloaded: tuple[SimServer, Waves, Metrics, Metrics],
) -> None:
    _, waves, before, after = overloaded
    client_ttft = waves.ttft()
    # Every first token left at least STALL after its release: a TTFT taken at the
    # release would be that much short of the client's (about 15%).
    assert client_ttft > 0.2 + STALL
    assert _mean_between(before, after, TTFT) == pytest.approx(client_ttft, rel=0.1)
    assert _mean_between(before, after, ITL) == pytest.approx(waves.itl(), rel=0.1)
    assert _mean_between(before, after, E2E) == pytest.approx(waves.e2e(), rel=0.1)


@pytest.mark.timing
def test_under_overload_the_lag_is_shown_and_warned(
    overloaded: tuple[SimServer, Waves, Metrics, Metrics],
) -> None:
    sim, _, _, after = overloaded
    # Every write came after a stall of STALL following its release.
    assert after.value(LAG) >= STALL * 0.99
    assert after.value(LAG_MAX) >= after.value(LAG)
    warnings = [line for line in sim.stderr().splitlines() if WARNING in line]
    assert warnings, sim.stderr()
    assert "WARNING" in warnings[0] and "/metrics" in warnings[0]
    # At most one every 10 seconds (the log's own timestamps).
    times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in warnings]
    assert all((b - a).total_seconds() >= 9.9 for a, b in pairwise(times))


@pytest.mark.timing
def test_at_a_load_the_process_keeps_up_with_nothing_is_warned(
    keeping_up: tuple[SimServer, Waves, Metrics, Metrics],
) -> None:
    sim, waves, before, after = keeping_up
    assert _mean_between(before, after, TTFT) == pytest.approx(waves.ttft(), rel=0.1)
    assert _mean_between(before, after, ITL) == pytest.approx(waves.itl(), rel=0.1)
    assert 0.0 < after.value(LAG) < WARN_ABOVE  # microseconds, where it keeps up
    assert WARNING not in sim.stderr()
