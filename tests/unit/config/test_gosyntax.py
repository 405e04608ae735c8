"""Go's strconv syntax for flag values."""

from __future__ import annotations

import pytest

from vllm_sim.config.gosyntax import (
    format_go_float,
    parse_go_bool,
    parse_go_float,
    parse_go_int,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("-50", -50),
        ("+7", 7),
        ("0x10", 16),
        ("0X1f", 31),
        ("0o17", 15),
        ("017", 15),
        ("0b11", 3),
        ("1_000", 1000),
        ("0x_1F", 31),
        ("9223372036854775807", (1 << 63) - 1),
        ("-9223372036854775808", -(1 << 63)),
    ],
)
def test_parse_go_int(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5", "08", "_1", "1_", "1__0", "0x", " 1", "١"])
def test_parse_go_int_syntax_errors(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid syntax$") as info:
        parse_go_int(text)
    assert str(info.value).startswith("strconv.ParseInt: parsing ")


def test_parse_go_int_range_error() -> None:
    with pytest.raises(ValueError) as info:
        parse_go_int("9223372036854775808")
    assert str(info.value) == (
        'strconv.ParseInt: parsing "9223372036854775808": value out of range'
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1.0), ("1.5", 1.5), ("-0.25", -0.25), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0),
     ("2.5E-1", 0.25)],
)  # fmt: skip
def test_parse_go_float(text: str, value: float) -> None:
    assert parse_go_float(text) == value


@pytest.mark.parametrize("text", ["", "x", "1_0", "1.2.3", "e5", "0x1p3", " 1"])
def test_parse_go_float_errors(text: str) -> None:
    with pytest.raises(ValueError, match=r"^strconv\.ParseFloat: parsing .*: invalid syntax$"):
        parse_go_float(text)


def test_parse_go_bool() -> None:
    for text in ("1", "t", "T", "TRUE", "true", "True"):
        assert parse_go_bool(text) is True
    for text in ("0", "f", "F", "FALSE", "false", "False"):
        assert parse_go_bool(text) is False
    with pytest.raises(ValueError, match=r'^strconv\.ParseBool: parsing "yes": invalid syntax$'):
        parse_go_bool("yes")


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0"), (1.0, "1"), (2.5, "2.5"), (100.0, "100"), (0.0001, "0.0001"), (1e-05, "1e-05"),
     (123456.0, "123456"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"), (-3.25, "-3.25")],
)  # fmt: skip
def test_format_go_float(value: float, text: str) -> None:
    assert format_go_float(value) == text
