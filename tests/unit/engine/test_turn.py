"""The engine's share of one turn of the event loop: its work and its time."""

from __future__ import annotations

import pytest

from vllm_sim.engine import turn
from vllm_sim.engine.turn import WORK_PER_TURN, Turn


def test_a_turn_is_over_after_its_work() -> None:
    current = Turn()
    current.begin()
    assert not current.over()
    current.work += WORK_PER_TURN
    assert current.over()
    current.begin()
    assert current.work == 0 and not current.over()


def test_a_turn_is_over_after_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn, "TURN_SECONDS", 0.0)
    current = Turn()
    current.begin()
    assert current.over()
