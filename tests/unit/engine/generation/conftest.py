"""The simulated tokenizer and its sentence bank, shared by the generation tests."""

from __future__ import annotations

import pytest

from vllm_sim.engine.generation.sentences import SentenceBank
from vllm_sim.engine.tokenizer import SimulatedTokenizer


@pytest.fixture
def tok() -> SimulatedTokenizer:
    return SimulatedTokenizer()


@pytest.fixture
def bank(tok: SimulatedTokenizer) -> SentenceBank:
    return SentenceBank(tok)
