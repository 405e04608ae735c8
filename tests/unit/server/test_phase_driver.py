"""The phase driver on a virtual-time event loop: each phase applied exactly at its
boundary, through the live configuration an admin update goes through, and its actions
(sleep, restart, crash) started on the instance."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

from tests.support.config import load
from tests.support.virtual_time import VirtualTimeLoop, run_virtual, virtual_now
from vllm_sim.config import Config
from vllm_sim.config.phases import Phase, PhaseKind, PhaseSchedule
from vllm_sim.frontend.failures import FailureInjector
from vllm_sim.frontend.omni import ImageEmission
from vllm_sim.server.build import build_instance
from vllm_sim.server.control import LiveConfig
from vllm_sim.server.phases import PhaseDriver

SECOND = 1_000_000_000
Action = tuple[float, str, object]


class TimedControl(LiveConfig):
    """The live configuration, noting when each phase's values were put in force."""

    def __init__(self, cfg: Config, actions: list[Action]) -> None:
        engine = build_instance(cfg, 8000).engine
        failures = FailureInjector(cfg.model, random.Random(0), cfg.max_model_len)
        super().__init__(cfg, engine, failures, ImageEmission(cfg.omni, random.Random(0)))
        self.failures = failures
        self._actions = actions

    def enter_phase(self, phase: Phase | None) -> None:
        super().enter_phase(phase)
        self._actions.append((virtual_now(), "config", self.config.latency_factor))


class Recorder:
    """A PhaseTarget noting what the driver asks of it, and when."""

    def __init__(self, cfg: Config) -> None:
        self.actions: list[Action] = []
        self.control: LiveConfig = TimedControl(cfg, self.actions)

    def _note(self, what: str, value: object = None) -> None:
        self.actions.append((virtual_now(), what, value))

    def sleep(self, level: int) -> None:
        self._note("sleep", level)

    def wake(self) -> None:
        self._note("wake")

    def go_down(self) -> None:
        self._note("down")

    def come_back(self) -> None:
        self._note("up")

    def crash(self, exit_code: int) -> None:
        self._note("crash", exit_code)


def phase(seconds: float, **keys: Any) -> Phase:
    return Phase(duration=round(seconds * SECOND), **keys)


def drive(
    schedule: PhaseSchedule | None,
    until: float,
    cfg: Config | None = None,
    during: Callable[[PhaseDriver, Recorder], None] | None = None,
) -> Recorder:
    """Runs `schedule` from virtual time 0 to `until`; `during` is called at time 0."""
    target = Recorder(cfg or load("--model", "m"))

    async def main() -> None:
        driver = PhaseDriver(target)
        target.control.on_phases = driver.start
        target.control.current_phase = driver.status
        driver.start(schedule, 0.0)
        if during is not None:
            during(driver, target)
        await asyncio.sleep(until)
        driver.stop()

    run_virtual(main())
    return target


DOUBLE_THEN_CRASH = PhaseSchedule(
    (
        phase(30, name="normal"),
        phase(30, name="double", latency_factor=2.0),
        Phase(kind=PhaseKind.CRASH, name="crash", exit_code=3),
    )
)


def test_doubled_latency_at_30s_and_the_crash_at_60s_exactly() -> None:
    target = drive(DOUBLE_THEN_CRASH, 100)
    assert target.actions == [
        (0.0, "config", 1.0),
        (30.0, "config", 2.0),
        (60.0, "config", 1.0),
        (60.0, "crash", 3),
    ]


def test_the_phase_in_force_at_each_instant() -> None:
    seen: list[tuple[float, int | None, float]] = []

    def probes(driver: PhaseDriver, target: Recorder) -> None:
        loop = asyncio.get_running_loop()
        for t in (29.999, 30.001, 59.999, 60.001):

            def probe(t: float = t) -> None:
                index = None if driver.current is None else driver.current.index
                seen.append((t, index, target.control.config.latency_factor))

            loop.call_at(t, probe)

    drive(DOUBLE_THEN_CRASH, 100, during=probes)
    assert seen == [(29.999, 0, 1.0), (30.001, 1, 2.0), (59.999, 1, 2.0), (60.001, 2, 1.0)]


def test_a_late_timer_does_not_shift_the_boundaries_after_it() -> None:
    def stall(driver: PhaseDriver, target: Recorder) -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        loop.call_at(10.0, loop.advance, 25.0)  # the loop wakes at 35 s, 5 s late

    target = drive(DOUBLE_THEN_CRASH, 100, during=stall)
    assert [(t, what) for t, what, _ in target.actions] == [
        (0.0, "config"),
        (35.0, "config"),
        (60.0, "config"),
        (60.0, "crash"),
    ]


def test_a_loop_stalled_past_several_boundaries_skips_the_phases_it_missed() -> None:
    """Boundaries missed while the loop stalled are not replayed: the timer enters the phase
    in force when it fires, and the boundaries after it stay on the exact timeline."""
    schedule = PhaseSchedule(tuple(phase(1, latency_factor=float(i + 1)) for i in range(6)))

    def stall(driver: PhaseDriver, target: Recorder) -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        loop.call_at(0.5, loop.advance, 3.0)  # the loop wakes at 3.5 s

    target = drive(schedule, 10, during=stall)
    assert [(t, factor) for t, _, factor in target.actions] == [
        (0.0, 1.0),
        (3.5, 4.0),  # phases 2 and 3 (1-3 s) never entered
        (4.0, 5.0),
        (5.0, 6.0),
        (6.0, 1.0),  # over: the configured values
    ]


def test_a_repeating_schedule_loops_until_stopped() -> None:
    schedule = PhaseSchedule((phase(1, latency_factor=2.0), phase(2, latency_factor=3.0)), True)
    target = drive(schedule, 7.5)
    times = [(t, factor) for t, _, factor in target.actions]
    assert times == [(0.0, 2.0), (1.0, 3.0), (3.0, 2.0), (4.0, 3.0), (6.0, 2.0), (7.0, 3.0)]


def test_a_sleep_phase_sleeps_at_its_start_and_wakes_at_its_end() -> None:
    schedule = PhaseSchedule((phase(1), phase(2, kind=PhaseKind.SLEEP, sleep_level=2), phase(1)))
    target = drive(schedule, 10)
    actions = [(t, what, value) for t, what, value in target.actions if what != "config"]
    assert actions == [(1.0, "sleep", 2), (3.0, "wake", None)]
    assert target.actions[-1] == (4.0, "config", 1.0)  # over: the configured values


def test_a_restart_phase_goes_down_and_comes_back() -> None:
    schedule = PhaseSchedule((phase(1), phase(0.5, kind=PhaseKind.RESTART), phase(1)))
    target = drive(schedule, 10)
    actions = [(t, what) for t, what, _ in target.actions if what != "config"]
    assert actions == [(1.0, "down"), (1.5, "up")]


def test_back_to_back_sleeps_wake_between_them() -> None:
    sleep = phase(1, kind=PhaseKind.SLEEP)
    target = drive(PhaseSchedule((sleep, sleep)), 10)
    actions = [(t, what) for t, what, _ in target.actions if what != "config"]
    assert actions == [(0.0, "sleep"), (1.0, "wake"), (1.0, "sleep"), (2.0, "wake")]


def test_an_admin_update_wins_until_the_next_boundary() -> None:
    """A factor posted during a phase is in force at once; the next phase's factor then
    replaces it; after the schedule the update is what is configured."""
    schedule = PhaseSchedule((phase(1, latency_factor=2.0), phase(1, latency_factor=3.0)))
    seen: list[tuple[float, float]] = []

    def update(driver: PhaseDriver, target: Recorder) -> None:
        loop = asyncio.get_running_loop()
        control = target.control

        def note(t: float) -> None:
            seen.append((t, control.config.latency_factor))

        loop.call_at(0.5, control.update, b'{"latency-factor": 5, "failure-injection-rate": 7}')
        for t in (0.6, 1.5, 2.5):
            loop.call_at(t, note, t)

    target = drive(schedule, 3, during=update)
    assert seen == [(0.6, 5.0), (1.5, 3.0), (2.5, 5.0)]
    assert target.control.config.failure_injection_rate == 7


def test_posting_phases_starts_that_schedule_now_and_null_stops_it() -> None:
    first = PhaseSchedule((phase(10, latency_factor=2.0, name="first"),))
    shown: list[dict[str, Any]] = []

    def replace_it(driver: PhaseDriver, target: Recorder) -> None:
        loop = asyncio.get_running_loop()
        control = target.control
        body = {"phases": [{"name": "second", "duration": "2s", "latency-factor": 4}]}
        loop.call_at(3.0, lambda: shown.append(control.update(json.dumps(body).encode())))
        loop.call_at(4.0, lambda: shown.append(control.shown()))
        loop.call_at(6.0, lambda: shown.append(control.shown()))
        loop.call_at(7.0, control.update, b'{"phases": [{"duration": "9s", "sleep": 1}]}')
        loop.call_at(8.0, control.update, b'{"phases": null}')

    target = drive(first, 10, during=replace_it)
    current = [s["current-phase"] for s in shown]
    assert current[0] == {
        "index": 0, "name": "second", "kind": "run", "cycle": 0, "started": "0s",
        "ends": "2s", "elapsed": "0s",
    }  # fmt: skip
    assert current[1]["elapsed"] == "1s" and shown[1]["latency-factor"] == 4.0
    assert current[2] is None and shown[2]["latency-factor"] == 1.0  # over at 5 s
    assert shown[0]["phases"]["phases"] == [
        {"name": "second", "duration": "2s", "latency-factor": 4.0}
    ]
    config = [(t, value) for t, what, value in target.actions if what == "config"]
    assert config == [(0.0, 2.0), (3.0, 4.0), (5.0, 1.0), (7.0, 1.0), (8.0, 1.0)]
    # The sleep posted at 7 s sleeps then; null at 8 s ends it, waking the engine.
    assert [(t, what) for t, what, _ in target.actions if what in ("sleep", "wake")] == [
        (7.0, "sleep"),
        (8.0, "wake"),
    ]


def test_no_schedule_does_nothing() -> None:
    assert drive(None, 5).actions == []


def test_a_crash_first_crashes_at_once() -> None:
    schedule = PhaseSchedule((Phase(kind=PhaseKind.CRASH, exit_code=0),))
    assert drive(schedule, 1).actions == [(0.0, "config", 1.0), (0.0, "crash", 0)]
