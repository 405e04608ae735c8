"""Configurations the what-if tests build their simulated instances from."""

from __future__ import annotations

import pytest

from tests.support.recorded_run import RECORDED_RUN_FLAGS
from vllm_sim.config import Config, load_config


@pytest.fixture
def roofline_config() -> Config:
    """The recorded run's server: steps timed by the roofline model."""
    return load_config(RECORDED_RUN_FLAGS, {})


@pytest.fixture
def instant_config() -> Config:
    """A server whose every latency is zero: requests end as soon as they start."""
    return load_config(["--model", "test-model", "--max-model-len", "4096"], {})
