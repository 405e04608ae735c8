"""A setting's one declaration: a Config field whose metadata makes the table entry."""

from __future__ import annotations

from dataclasses import dataclass, fields

from vllm_sim.config.durations import Duration
from vllm_sim.config.kinds import DURATION, INT, STRING
from vllm_sim.config.setting import (
    EnvRule,
    EnvVar,
    Group,
    View,
    ViewField,
    declared,
    env_only,
    flag,
    setting,
)

OTHER = View("other")


@dataclass(frozen=True, kw_only=True)
class _Declared:
    some_knob: Duration = flag(DURATION, 5, Group.LATENCY, "A knob", to=(OTHER("knob"),))
    count: int = setting(INT, 1, Group.SERVER, "Count", key="n", json_key=None, to=(OTHER,))
    from_env: str = env_only(STRING, "", "Env", "FromEnv", EnvVar("X", EnvRule.ONLY))


def test_names_come_from_the_field_unless_given() -> None:
    knob, count, env = declared(fields(_Declared))
    assert (knob.key, knob.attr, knob.json_key) == ("some-knob", "some_knob", "some-knob")
    assert (count.key, count.attr, count.json_key) == ("n", "count", None)
    assert (env.key, env.json_key, env.cli, env.yaml) == ("from-env", "FromEnv", False, False)


def test_duration_defaults_are_durations() -> None:
    knob = declared(fields(_Declared))[0]
    assert isinstance(knob.default, Duration) and knob.default == 5


def test_views_name_the_field_they_fill() -> None:
    knob, count, _ = declared(fields(_Declared))
    assert knob.views == (ViewField(OTHER, "knob"),)
    assert count.views == (ViewField(OTHER, "count"),)


def test_a_declaration_is_a_required_field() -> None:
    assert all(spec.default is spec.default_factory for spec in fields(_Declared))
