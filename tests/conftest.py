"""Shared fixtures: a running simulator with default settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.simserver import SimServer


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
