"""A phase schedule: how one instance's behaviour changes over time, for autoscaler and
router tests (slow down, fail more, sleep, restart, crash).

A schedule is a list of phases run one after the other from the moment the server listens;
after the last one the configured values are in force again, unless the schedule repeats.
It is written in YAML (`--phases FILE`, or a `phases:` key of the `--config` file) or JSON
(`POST /admin/config`), either as the list itself or as a mapping `{phases: [...], repeat:
true}`. Each phase is one of four kinds, named by the key that makes it:

- a running phase (none of the keys below): `latency-factor`, `failure-rate`,
  `failure-types` change how requests are served;
- `sleep: 1` or `2` (`true` is 1): the engine sleeps as `POST /sleep?level=` makes it,
  and wakes when the phase ends;
- `restart: true`: the instance stops serving for the phase and comes back fresh;
- `crash: true`: the process exits with `exit-code` (default 1) when the phase begins.

Every phase but a crash has a `duration` (Go syntax: `30s`, `1m30s`) and may have a `name`.
Decoding here checks the shape (keys, types, which keys a kind takes); the ranges are the
setting's rule (`phase_rules`), so a bad value is refused alike on every path, naming the
phase by its index and the key: `phases[1].latency-factor ...`.
"""

from __future__ import annotations

import enum
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from .durations import Duration, format_duration, parse_duration

MAX_PHASES_BYTES = 1 << 20  # 1 MiB, as the --config file
T = TypeVar("T")


class PhasesError(ValueError):
    """A schedule of the wrong shape; `str(error)` names the phase and key."""


class PhaseKind(enum.Enum):
    """What a phase does; the key that makes a phase of each kind is its value."""

    RUN = "run"
    SLEEP = "sleep"
    RESTART = "restart"
    CRASH = "crash"


_KIND_KEYS = (PhaseKind.SLEEP, PhaseKind.RESTART, PhaseKind.CRASH)
_SWITCHES = tuple(kind.value for kind in _KIND_KEYS)
# The keys each kind takes: anything else in it would silently do nothing.
ALLOWED_KEYS: dict[PhaseKind, tuple[str, ...]] = {
    PhaseKind.RUN: ("name", "duration", "latency-factor", "failure-rate", "failure-types"),
    PhaseKind.SLEEP: ("name", "duration", "sleep"),
    PhaseKind.RESTART: ("name", "duration", "restart"),
    PhaseKind.CRASH: ("name", "crash", "exit-code"),
}
PHASE_KEYS = tuple(sorted({key for keys in ALLOWED_KEYS.values() for key in keys}))
SCHEDULE_KEYS = ("phases", "repeat")


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """One phase; `None` keeps the configured value. A crash phase has no duration (0):
    the process ends when it begins."""

    kind: PhaseKind = PhaseKind.RUN
    duration: int = 0  # nanoseconds, as a Go duration
    name: str = ""
    latency_factor: float | None = None
    failure_rate: int | None = None
    failure_types: tuple[str, ...] | None = None
    sleep_level: int = 1  # vLLM's /sleep level: 1 offloads the weights, 2 discards them
    exit_code: int = 1


@dataclass(frozen=True, slots=True)
class PhaseSchedule:
    phases: tuple[Phase, ...]
    repeat: bool = False


def phase_label(index: int, phase: Phase) -> str:
    """How logs and errors name a phase: `phases[2]`, with its name when it has one."""
    return f'phases[{index}] "{phase.name}"' if phase.name else f"phases[{index}]"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list | tuple) else "a mapping"


def _expected(where: str, what: str, value: object) -> PhasesError:
    return PhasesError(f"{where}: expected {what}, got {_type_name(value)}")


def _string(where: str, value: object) -> str:
    if not isinstance(value, str):
        raise _expected(where, "a string", value)
    return value


def _integer(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _expected(where, "an integer", value)
    return value


def _number(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _expected(where, "a number", value)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise PhasesError(f"{where}: expected a finite number")
    return number


def _duration(where: str, value: object) -> Duration:
    try:
        return parse_duration(_string(where, value))
    except PhasesError:
        raise _expected(where, "a duration such as 30s or 1m30s", value) from None
    except ValueError as error:
        raise PhasesError(f"{where}: {error}") from None


def _strings(where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _expected(where, "a list of strings", value)
    return tuple(value)


def _sleep_level(where: str, value: object) -> int:
    if value is True:
        return 1
    return _integer(where, value)


def _switched_on(where: str, data: dict[str, Any], key: str) -> bool:
    """Whether `key` makes this phase of its kind (`sleep: 2` does, `crash: false` not)."""
    if key not in data:
        return False
    value = data[key]
    if key == "sleep":
        if value is False:
            return False
        _sleep_level(f"{where}.sleep", value)
        return True
    if not isinstance(value, bool):
        raise _expected(f"{where}.{key}", "true or false", value)
    return value


def _kind(where: str, data: dict[str, Any]) -> PhaseKind:
    kinds = [kind for kind in _KIND_KEYS if _switched_on(where, data, kind.value)]
    if len(kinds) > 1:
        names = " and ".join(kind.value for kind in kinds)
        raise PhasesError(f"{where}: {names} cannot be in one phase")
    return kinds[0] if kinds else PhaseKind.RUN


def _check_keys(where: str, data: dict[Any, Any]) -> None:
    for key in data:
        if key not in PHASE_KEYS:
            known = ", ".join(PHASE_KEYS)
            raise PhasesError(f"{where}: unknown key {str(key)!r} (a phase takes {known})")


def _decode_phase(index: int, data: object) -> Phase:
    where = f"phases[{index}]"
    if not isinstance(data, dict):
        raise _expected(where, "a mapping of phase keys", data)
    _check_keys(where, data)
    kind = _kind(where, data)
    allowed = ALLOWED_KEYS[kind]
    for key in data:
        switched_off = key in _SWITCHES and data[key] is False  # `crash: false` says nothing
        if key not in allowed and not switched_off:
            raise PhasesError(
                f"{where}.{key}: a {kind.value} phase takes only {', '.join(allowed)}"
            )
    if kind is not PhaseKind.CRASH and "duration" not in data:
        raise PhasesError(f"{where}.duration: required (every phase but a crash has one)")

    def given(key: str, read: Callable[[str, object], T]) -> T | None:
        return read(f"{where}.{key}", data[key]) if key in data else None

    exit_code = given("exit-code", _integer)
    level = given("sleep", _sleep_level) if kind is PhaseKind.SLEEP else None
    return Phase(
        kind=kind,
        duration=given("duration", _duration) or 0,
        name=given("name", _string) or "",
        latency_factor=given("latency-factor", _number),
        failure_rate=given("failure-rate", _integer),
        failure_types=given("failure-types", _strings),
        sleep_level=1 if level is None else level,
        exit_code=1 if exit_code is None else exit_code,
    )


def decode_schedule(data: object) -> PhaseSchedule | None:
    """A schedule from decoded YAML or JSON: a list of phases, or a mapping with `phases`
    and `repeat`. None and an empty list mean no schedule."""
    repeat = False
    if isinstance(data, dict):
        for key in data:
            if key not in SCHEDULE_KEYS:
                raise PhasesError(f"unknown key {str(key)!r} (a schedule takes phases, repeat)")
        if not isinstance(data.get("repeat", False), bool):
            raise _expected("repeat", "true or false", data["repeat"])
        repeat = data.get("repeat", False)
        if "phases" not in data:
            raise PhasesError("phases: required (the list of phases)")
        data = data["phases"]
        if not isinstance(data, list):
            raise _expected("phases", "a list of phases", data)
    if data is None:
        return None
    if not isinstance(data, list):
        raise _expected("phases", "a list of phases, or a mapping with phases and repeat", data)
    if not data:
        return None
    return PhaseSchedule(tuple(_decode_phase(i, item) for i, item in enumerate(data)), repeat)


def _read_file(path: str) -> str:
    """The text of a phases file: a regular file (a device or a pipe would never end), read
    only up to MAX_PHASES_BYTES."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise PhasesError(f"phases file {path} is not a regular file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_PHASES_BYTES + 1)
    except OSError as error:
        reason = error.strerror or str(error)
        raise PhasesError(f"phases file {path}: {reason[:1].lower()}{reason[1:]}") from None
    if len(data) > MAX_PHASES_BYTES:
        raise PhasesError(f"phases file {path} is larger than {MAX_PHASES_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PhasesError(f"phases file {path}: {error}") from None


def load_phases_text(text: str) -> PhaseSchedule | None:
    """`--phases` as given: a file's path, or the schedule itself as YAML or JSON (starting
    with `[` or `{`, as a fleet entry passes it)."""
    inline = text.lstrip().startswith(("[", "{"))
    source = text if inline else _read_file(text)
    where = "phases" if inline else f"phases file {text}"
    try:
        data = yaml.safe_load(source)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise PhasesError(f"{where}: not valid YAML{line}") from None
    return decode_schedule(data)


def phase_to_json(phase: Phase) -> dict[str, object]:
    """A phase as GET /admin/config shows it: the keys it was given, durations in Go's
    syntax; decode_schedule reads it back to the same phase."""
    out: dict[str, object] = {}
    if phase.name:
        out["name"] = phase.name
    if phase.kind is not PhaseKind.CRASH:
        out["duration"] = format_duration(phase.duration)
    if phase.kind is PhaseKind.SLEEP:
        out["sleep"] = phase.sleep_level
    elif phase.kind is PhaseKind.RESTART:
        out["restart"] = True
    elif phase.kind is PhaseKind.CRASH:
        out |= {"crash": True, "exit-code": phase.exit_code}
    if phase.latency_factor is not None:
        out["latency-factor"] = phase.latency_factor
    if phase.failure_rate is not None:
        out["failure-rate"] = phase.failure_rate
    if phase.failure_types is not None:
        out["failure-types"] = list(phase.failure_types)
    return out


def schedule_to_json(schedule: PhaseSchedule) -> dict[str, object]:
    return {"phases": [phase_to_json(p) for p in schedule.phases], "repeat": schedule.repeat}
