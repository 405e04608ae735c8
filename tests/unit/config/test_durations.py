"""Go duration syntax and formatting."""

from __future__ import annotations

import pytest

from vllm_sim.config import format_duration, parse_duration

MS = 1_000_000
S = 1_000 * MS


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("-0", 0),
        ("+0", 0),
        ("100ms", 100 * MS),
        ("1.5s", 1_500 * MS),
        ("1h30m", 5_400 * S),
        ("250us", 250_000),
        ("250µs", 250_000),
        ("250μs", 250_000),
        ("-1ms", -MS),
        ("+2s", 2 * S),
        ("1ns", 1),
        ("1.s", S),
        (".5s", 500 * MS),
        ("1m0.5s", 60 * S + 500 * MS),
        ("2h45m30.25s", 2 * 3600 * S + 45 * 60 * S + 30 * S + 250 * MS),
        ("0.001ms", 1_000),
        ("9223372036854775807ns", (1 << 63) - 1),
        ("-9223372036854775808ns", -(1 << 63)),
    ],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("100", 'time: missing unit in duration "100"'),
        ("x", 'time: invalid duration "x"'),
        ("", 'time: invalid duration ""'),
        ("-", 'time: invalid duration "-"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1.5", 'time: missing unit in duration "1.5"'),
        ("ms", 'time: invalid duration "ms"'),
        (".s", 'time: invalid duration ".s"'),
        ("1s 2s", 'time: unknown unit "s " in duration "1s 2s"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
        ('1"x', 'time: unknown unit "\\"x" in duration "1\\"x"'),
        ("1é", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'),
    ],
)
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (2, "2ns"),
        (250_000, "250µs"),
        (1_500, "1.5µs"),
        (100 * MS, "100ms"),
        (1_500_000, "1.5ms"),
        (1_500 * MS, "1.5s"),
        (60 * S, "1m0s"),
        (90 * S, "1m30s"),
        (3_600 * S, "1h0m0s"),
        (7_200 * S, "2h0m0s"),
        (3_600 * S + 1, "1h0m0.000000001s"),
        (-MS, "-1ms"),
        (-(1 << 63), "-2562047h47m16.854775808s"),
    ],
)
def test_format_duration(ns: int, text: str) -> None:
    assert format_duration(ns) == text


@pytest.mark.parametrize("ns", [0, 1, 999, 1_234_567, 59 * S + 1, 3 * 3600 * S + 7 * MS, -42 * S])
def test_format_then_parse_round_trips(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns


def test_parsed_durations_are_typed_and_read_in_seconds() -> None:
    from vllm_sim.config import Duration

    value = parse_duration("1.5s")
    assert isinstance(value, Duration) and value == 1_500 * MS
    assert value.seconds == 1.5
    assert isinstance(parse_duration("0"), Duration)


def test_every_duration_setting_loads_as_a_duration() -> None:
    from dataclasses import fields

    from tests.support.config import load
    from vllm_sim.config import Config, Duration

    cfg = load("--model", "m", "--drain-timeout", "2s", "--inter-token-latency", "0")
    durations = [f.name for f in fields(Config) if f.type in ("Duration", Duration)]
    assert len(durations) > 15
    assert all(isinstance(getattr(cfg, name), Duration) for name in durations)
    assert cfg.drain_timeout.seconds == 2.0
