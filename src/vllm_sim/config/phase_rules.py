"""The ranges of a phase schedule, checked as the `phases` setting's rule: the same on the
command line, in YAML and in POST /admin/config. The first bad value wins, named by its
phase's index and key (`phases[1].latency-factor must be ...`)."""

from __future__ import annotations

from collections.abc import Callable

from .durations import Duration, format_duration
from .phases import Phase, PhaseKind, PhaseSchedule

HOUR = 3_600 * 1_000_000_000
# A week: longer than any test runs, short enough that no boundary overflows a timer.
MAX_PHASE_DURATION = Duration(7 * 24 * HOUR)
# As --time-factor-under-load: beyond it no latency model is left, only a stalled server.
MAX_LATENCY_FACTOR = 100.0
LATENCY_FACTOR_MESSAGE = "latency factor must be greater than 0 and at most 100"


def latency_factor_error(value: float) -> str | None:
    """None, or why `value` cannot multiply every latency (NaN fails too)."""
    return None if 0 < value <= MAX_LATENCY_FACTOR else f"{LATENCY_FACTOR_MESSAGE}, got {value:g}"


# The shortest phase: below a few event-loop turns, a repeating schedule would spend the
# server's whole time changing its configuration.
MIN_PHASE_DURATION = Duration(10_000_000)  # 10 ms


def _duration_error(phase: Phase) -> str | None:
    if phase.kind is PhaseKind.CRASH:
        return None
    if phase.duration < MIN_PHASE_DURATION:
        shortest = format_duration(MIN_PHASE_DURATION)
        return f"duration must be at least {shortest}, got {format_duration(phase.duration)}"
    if phase.duration > MAX_PHASE_DURATION:
        return f"duration cannot be more than {format_duration(MAX_PHASE_DURATION)}"
    return None


def _factor_error(phase: Phase) -> str | None:
    factor = phase.latency_factor
    return None if factor is None else latency_factor_error(factor)


def _rate_error(phase: Phase) -> str | None:
    rate = phase.failure_rate
    if rate is None or 0 <= rate <= 100:
        return None
    return f"failure rate must be between 0 and 100, got {rate}"


def _level_error(phase: Phase) -> str | None:
    if phase.kind is not PhaseKind.SLEEP or phase.sleep_level in (1, 2):
        return None
    return f"sleep level must be 1 or 2 (or true: 1), got {phase.sleep_level}"


def _exit_code_error(phase: Phase) -> str | None:
    if 0 <= phase.exit_code <= 255:
        return None
    return f"exit code must be between 0 and 255, got {phase.exit_code}"


_CHECKS: tuple[tuple[str, Callable[[Phase], str | None]], ...] = (
    ("duration", _duration_error),
    ("latency-factor", _factor_error),
    ("failure-rate", _rate_error),
    ("sleep", _level_error),
    ("exit-code", _exit_code_error),
)


def _types_error(phase: Phase, known: tuple[str, ...]) -> str | None:
    for name in phase.failure_types or ():
        if name not in known:
            return f"invalid failure type '{name}', valid types are: {', '.join(known)}"
    return None


def _order_error(schedule: PhaseSchedule) -> str | None:
    """A crash ends the process: nothing may follow it, not even a repetition."""
    last = len(schedule.phases) - 1
    for index, phase in enumerate(schedule.phases):
        if phase.kind is PhaseKind.CRASH and index < last:
            return f"phases[{index + 1}]: comes after the crash of phases[{index}] and never runs"
    if schedule.repeat and schedule.phases[last].kind is PhaseKind.CRASH:
        return "repeat: a schedule that ends in a crash never repeats"
    return None


def phases_error(schedule: PhaseSchedule | None, failure_types: tuple[str, ...]) -> str | None:
    """None, or the first thing wrong with `schedule`; `failure_types` are the known ones."""
    if schedule is None:
        return None
    for index, phase in enumerate(schedule.phases):
        for key, check in (*_CHECKS, ("failure-types", lambda p: _types_error(p, failure_types))):
            error = check(phase)
            if error is not None:
                return f"phases[{index}].{key}: {error}"
    return _order_error(schedule)
