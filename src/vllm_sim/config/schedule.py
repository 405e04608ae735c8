"""A phase schedule on its timeline: which phase is in force at a time, when the next
boundary comes, and the configuration a phase puts in force.

Pure functions of the time elapsed since the schedule started, in integer nanoseconds (a
phase's duration is a Go duration), so boundaries are exact: a phase is in force from its
start included to its end excluded. A crash phase, which ends the process, is in force from
its start on. The server's driver (`vllm_sim.server.phases`) arms one timer per boundary
and applies what these say.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .durations import Duration, format_duration
from .model import Config
from .phases import Phase, PhaseKind, PhaseSchedule, phase_label


@dataclass(frozen=True, slots=True)
class PhaseAt:
    """A phase in force: its index, and when this occurrence of it began and ends (None:
    never, a crash), in nanoseconds since the schedule started; `cycle` counts the
    repetitions of a repeating schedule before it."""

    index: int
    phase: Phase
    start: int
    end: int | None
    cycle: int = 0

    @property
    def label(self) -> str:
        return phase_label(self.index, self.phase)

    def to_json(self) -> dict[str, object]:
        """What GET /admin/config shows as `current-phase`."""
        return {
            "index": self.index,
            "name": self.phase.name,
            "kind": self.phase.kind.value,
            "cycle": self.cycle,
            "started": format_duration(self.start),
            "ends": None if self.end is None else format_duration(self.end),
        }


def cycle_length(schedule: PhaseSchedule) -> int:
    """Nanoseconds the phases before a crash (or all of them) take, once."""
    return sum(p.duration for p in schedule.phases if p.kind is not PhaseKind.CRASH)


def phase_at(schedule: PhaseSchedule, elapsed: int) -> PhaseAt | None:
    """The phase in force `elapsed` nanoseconds after the schedule started; None once the
    last phase has ended (a schedule that does not repeat)."""
    elapsed = max(elapsed, 0)
    length = cycle_length(schedule)
    cycle = 0
    if schedule.repeat and length > 0:
        cycle, elapsed = divmod(elapsed, length)
    offset = cycle * length
    start = 0
    for index, phase in enumerate(schedule.phases):
        if phase.kind is PhaseKind.CRASH:
            return PhaseAt(index, phase, offset + start, None, cycle)
        end = start + phase.duration
        if elapsed < end:
            return PhaseAt(index, phase, offset + start, offset + end, cycle)
        start = end
    return None


def next_boundary(schedule: PhaseSchedule, elapsed: int) -> int | None:
    """When the phase in force at `elapsed` ends (nanoseconds since the start): the next
    time something changes; None if nothing ever will."""
    current = phase_at(schedule, elapsed)
    return None if current is None else current.end


def with_phase(configured: Config, phase: Phase | None) -> Config:
    """The configuration in force during `phase`: the configured one with what the phase
    sets on top (None: no phase, the configured values)."""
    if phase is None or phase.kind is not PhaseKind.RUN:
        return configured
    factor, rate, types = phase.latency_factor, phase.failure_rate, phase.failure_types
    return replace(
        configured,
        latency_factor=configured.latency_factor if factor is None else factor,
        failure_injection_rate=configured.failure_injection_rate if rate is None else rate,
        failure_types=configured.failure_types if types is None else types,
    )


def describe(phase: Phase) -> str:
    """What a phase does, for the log line at its start."""
    kind = phase.kind
    if kind is PhaseKind.SLEEP:
        return f"the engine sleeps (level {phase.sleep_level}) for {_for(phase.duration)}"
    if kind is PhaseKind.RESTART:
        return f"the instance is down for {_for(phase.duration)}, then restarts"
    if kind is PhaseKind.CRASH:
        return f"the process exits with status {phase.exit_code}"
    parts = []
    if phase.latency_factor is not None:
        parts.append(f"latency x{phase.latency_factor:g}")
    if phase.failure_rate is not None:
        parts.append(f"failure rate {phase.failure_rate}%")
    if phase.failure_types is not None:
        parts.append("failure types " + (",".join(phase.failure_types) or "all"))
    settings = ", ".join(parts) or "the configured values"
    return f"{settings} for {_for(phase.duration)}"


def _for(duration: int) -> str:
    return format_duration(Duration(duration))
