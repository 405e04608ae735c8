"""HTTP clients bound to the session simulators (random mode `sim`, echo mode `echo_sim`)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis.configuration import set_hypothesis_home_dir

from tests.simserver import SimServer

# Hypothesis caches (unicode tables, constants) go to the temp dir, not the repository root.
set_hypothesis_home_dir(str(Path(tempfile.gettempdir()) / "vllm-sim-hypothesis"))


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
