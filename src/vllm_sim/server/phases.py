"""The phase schedule's driver: applies each phase to one served instance at its boundary.

Time 0 is when the server listens. Which phase is in force when is the config layer's pure
timeline (`vllm_sim.config.schedule`); the driver arms one event-loop timer for the next
boundary (`call_at`, never polling), so between boundaries it costs nothing and no request
pays for it. At a boundary it leaves the phase ending (a sleeping engine wakes, a restarted
instance comes back), puts the configured values with the new phase's on top in force
through the same `LiveConfig.apply` an admin update goes through, then starts what the
phase does (sleep, go down, crash). Each boundary is computed from the timeline in exact
nanoseconds, not from the clock's reading when the timer fired, so a late timer never
shifts the ones after it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from vllm_sim.config import format_duration
from vllm_sim.config.phases import PhaseKind, PhaseSchedule
from vllm_sim.config.schedule import PhaseAt, describe, phase_at
from vllm_sim.server.control import LiveConfig

log = logging.getLogger("vllm_sim")
NS = 1e9


class PhaseTarget(Protocol):
    """What a schedule acts on: one served instance."""

    @property
    def control(self) -> LiveConfig:
        """The configuration of the instance serving now (a new one after a restart)."""
        ...

    def sleep(self, level: int) -> None:
        """Puts the engine to sleep as POST /sleep?level= does."""
        ...

    def wake(self) -> None:
        """Wakes every part of a sleeping engine, as POST /wake_up does."""
        ...

    def go_down(self) -> None:
        """Stops serving at once: listening sockets closed, requests in flight cut."""
        ...

    def come_back(self) -> None:
        """Serves again with a fresh instance, as a restarted pod."""
        ...

    def crash(self, exit_code: int) -> None:
        """Ends the process with `exit_code`."""
        ...


class PhaseDriver:
    """Runs one instance's schedule: `start` it (again, to replace it), `stop` it when the
    server stops; `current` is the phase in force."""

    def __init__(self, target: PhaseTarget) -> None:
        self._target = target
        self._schedule: PhaseSchedule | None = None
        self._origin = 0.0  # the loop time the schedule started at
        self._timer: asyncio.TimerHandle | None = None
        self.current: PhaseAt | None = None

    @property
    def schedule(self) -> PhaseSchedule | None:
        return self._schedule

    def start(self, schedule: PhaseSchedule | None, origin: float | None = None) -> None:
        """Runs `schedule` from `origin` (a loop time; now when None), replacing the one in
        force, whose phase is left first. None: no schedule, the configured values."""
        self.stop()
        self._schedule = schedule
        self._origin = asyncio.get_running_loop().time() if origin is None else origin
        self._move_to(0)

    def status(self) -> dict[str, object] | None:
        """The phase in force as GET /admin/config shows it, with the time elapsed since
        the schedule started (None: no phase is)."""
        current = self.current
        if current is None:
            return None
        elapsed = round((asyncio.get_running_loop().time() - self._origin) * NS)
        return {**current.to_json(), "elapsed": format_duration(elapsed)}

    def stop(self) -> None:
        """No more boundaries: the server is stopping (the phase in force stays)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _move_to(self, elapsed: int) -> None:
        """The boundary `elapsed` ns after the start: leave the phase ending, enter the next
        and arm the timer of its end."""
        self._timer = None
        schedule = self._schedule
        entering = None if schedule is None else phase_at(schedule, elapsed)
        leaving, self.current = self.current, entering
        if leaving is not None:
            self._leave(leaving)
        if entering is None and leaving is None:
            return  # no schedule, nor one to end
        self._enter(entering)
        if entering is not None and entering.end is not None:
            when = self._origin + entering.end / NS
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(when, self._at_boundary, entering.end)

    def _at_boundary(self, end: int) -> None:
        """A boundary's timer: the phase in force now, which is the next one unless the loop
        woke late past it (the phases missed meanwhile are skipped, not replayed)."""
        now = round((asyncio.get_running_loop().time() - self._origin) * NS)
        self._move_to(max(end, now))

    def _leave(self, leaving: PhaseAt) -> None:
        kind = leaving.phase.kind
        if kind is PhaseKind.SLEEP:
            self._target.wake()
        elif kind is PhaseKind.RESTART:
            self._target.come_back()

    def _enter(self, entering: PhaseAt | None) -> None:
        target = self._target
        target.control.enter_phase(None if entering is None else entering.phase)
        if entering is None:
            log.info("The phase schedule is over: the configured values are in force")
            return
        phase = entering.phase
        crash = phase.kind is PhaseKind.CRASH
        level = logging.WARNING if crash else logging.INFO
        log.log(level, "%s begins: %s", entering.label, describe(phase))
        if phase.kind is PhaseKind.SLEEP:
            target.sleep(phase.sleep_level)
        elif phase.kind is PhaseKind.RESTART:
            target.go_down()
        elif crash:
            target.crash(phase.exit_code)
