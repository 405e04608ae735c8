"""Releasing a due token: the gap it records, measured since the previous release."""

from __future__ import annotations

from tests.unit.engine.test_kv_blocks import sequence
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.timing.release import release_token


class Gaps(EngineObserver):
    def __init__(self) -> None:
        self.gaps: list[tuple[float, int]] = []

    def inter_tokens(self, seq: Sequence, delay: float, count: int) -> None:
        self.gaps.append((delay, count))


def test_each_later_token_records_its_measured_gap() -> None:
    seq, observer = sequence(4), Gaps()
    release_token(seq, 1.0, observer)
    assert seq.emitted == 1 and seq.t_last_token == 1.0
    assert observer.gaps == []  # the first token's wait is its TTFT, not a gap
    release_token(seq, 1.25, observer)
    release_token(seq, 1.75, observer)
    assert observer.gaps == [(0.25, 1), (0.5, 1)]
    assert seq.emitted == 3 and seq.t_last_token == 1.75


def test_a_tool_calls_first_token_follows_with_no_gap() -> None:
    seq, observer = sequence(4), Gaps()
    seq.call_starts = frozenset({2})
    for now in (1.0, 1.1, 1.2, 1.3):
        release_token(seq, now, observer)
    assert [count for _, count in observer.gaps] == [1, 1]  # tokens 2 and 4, not 3
    assert seq.emitted == 4
