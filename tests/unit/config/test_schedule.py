"""The schedule's timeline, exactly: which phase is in force at a time and when the next
boundary comes, as pure functions of the nanoseconds since the schedule started."""

from __future__ import annotations

from tests.support.config import load
from vllm_sim.config.phases import Phase, PhaseKind, PhaseSchedule
from vllm_sim.config.schedule import (
    PhaseAt,
    cycle_length,
    describe,
    next_boundary,
    phase_at,
    with_phase,
)

MS = 1_000_000
SECOND = 1_000 * MS

NORMAL = Phase(name="normal", duration=30 * SECOND)
DOUBLE = Phase(name="double", duration=30 * SECOND, latency_factor=2.0)
CRASH = Phase(kind=PhaseKind.CRASH, name="crash", exit_code=3)
DOUBLE_THEN_CRASH = PhaseSchedule((NORMAL, DOUBLE, CRASH))


def _index(schedule: PhaseSchedule, seconds: float) -> int | None:
    current = phase_at(schedule, round(seconds * SECOND))
    return None if current is None else current.index


def test_doubling_after_30s_and_crashing_at_60s() -> None:
    s = DOUBLE_THEN_CRASH
    assert [_index(s, t) for t in (0, 29.999, 30, 59.999, 60, 3600)] == [0, 0, 1, 1, 2, 2]
    assert phase_at(s, 30 * SECOND - 1) == PhaseAt(0, NORMAL, 0, 30 * SECOND)
    assert phase_at(s, 30 * SECOND) == PhaseAt(1, DOUBLE, 30 * SECOND, 60 * SECOND)
    assert phase_at(s, 60 * SECOND - 1) == PhaseAt(1, DOUBLE, 30 * SECOND, 60 * SECOND)
    assert phase_at(s, 60 * SECOND) == PhaseAt(2, CRASH, 60 * SECOND, None)


def test_the_next_boundary_is_the_end_of_the_phase_in_force() -> None:
    s = DOUBLE_THEN_CRASH
    assert next_boundary(s, 0) == 30 * SECOND
    assert next_boundary(s, 30 * SECOND - 1) == 30 * SECOND
    assert next_boundary(s, 30 * SECOND) == 60 * SECOND
    assert next_boundary(s, 60 * SECOND) is None  # the crash is for ever


def test_after_the_last_phase_nothing_is_in_force() -> None:
    s = PhaseSchedule((NORMAL, DOUBLE))
    assert _index(s, 59.999) == 1
    assert phase_at(s, 60 * SECOND) is None
    assert next_boundary(s, 60 * SECOND) is None
    assert next_boundary(s, 59 * SECOND) == 60 * SECOND


def test_a_repeating_schedule_loops_and_counts_its_cycles() -> None:
    s = PhaseSchedule((NORMAL, DOUBLE), repeat=True)
    assert cycle_length(s) == 60 * SECOND
    assert [_index(s, t) for t in (0, 30, 59.999, 60, 89.999, 90, 120)] == [0, 1, 1, 0, 0, 1, 0]
    assert phase_at(s, 90 * SECOND) == PhaseAt(1, DOUBLE, 90 * SECOND, 120 * SECOND, cycle=1)
    assert phase_at(s, 1_000 * 60 * SECOND + 1) == PhaseAt(
        0, NORMAL, 60_000 * SECOND, 60_030 * SECOND, cycle=1000
    )
    assert next_boundary(s, 60 * SECOND) == 90 * SECOND


def test_a_restart_phase_is_in_force_for_its_duration() -> None:
    restart = Phase(kind=PhaseKind.RESTART, duration=2 * SECOND)
    s = PhaseSchedule((Phase(duration=SECOND), restart, Phase(duration=SECOND)))
    assert [_index(s, t) for t in (0.999, 1, 2.999, 3, 3.999, 4)] == [0, 1, 1, 2, 2, None]
    assert phase_at(s, SECOND) == PhaseAt(1, restart, SECOND, 3 * SECOND)


def test_a_crash_alone_is_in_force_from_the_start() -> None:
    s = PhaseSchedule((CRASH,))
    assert phase_at(s, 0) == PhaseAt(0, CRASH, 0, None)
    assert next_boundary(s, 0) is None


def test_the_time_before_the_start_is_the_start() -> None:
    assert _index(DOUBLE_THEN_CRASH, -1) == 0


def test_a_phase_sets_its_keys_on_the_configured_values() -> None:
    cfg = load("--model", "m", "--failure-injection-rate", "5", "--latency-factor", "1.5")
    assert with_phase(cfg, None) is cfg
    assert with_phase(cfg, NORMAL) == cfg
    doubled = with_phase(cfg, DOUBLE)
    assert (doubled.latency_factor, doubled.failure_injection_rate) == (2.0, 5)
    failing = with_phase(cfg, Phase(duration=SECOND, failure_rate=50, failure_types=()))
    assert (failing.latency_factor, failing.failure_injection_rate) == (1.5, 50)
    assert with_phase(cfg, CRASH) is cfg


def test_each_phase_is_described_for_its_log_line() -> None:
    assert describe(DOUBLE) == "latency x2 for 30s"
    assert describe(NORMAL) == "the configured values for 30s"
    assert describe(CRASH) == "the process exits with status 3"
    sleep = Phase(kind=PhaseKind.SLEEP, duration=SECOND, sleep_level=2)
    assert describe(sleep) == "the engine sleeps (level 2) for 1s"
