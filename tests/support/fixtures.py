"""Session fixtures: the shared simulators and raw HTTP clients bound to them."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import SimServer


@pytest.fixture(scope="session")
def sim() -> Iterator[SimServer]:
    """One simulator for tests that only read its defaults (random mode, no latency)."""
    with SimServer(["--max-num-seqs", "64"]) as server:
        yield server


@pytest.fixture(scope="session")
def echo_sim() -> Iterator[SimServer]:
    """One simulator in echo mode, for tests that check content."""
    with SimServer(["--mode", "echo", "--max-num-seqs", "64"]) as server:
        yield server


@pytest.fixture(scope="session")
def http(sim: SimServer) -> Iterator[httpx.Client]:
    """Raw client for the random-mode simulator."""
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def echo_http(echo_sim: SimServer) -> Iterator[httpx.Client]:
    """Raw client for the echo-mode simulator."""
    with httpx.Client(base_url=echo_sim.url, timeout=30) as client:
        yield client
