"""Go's scalar syntax (strconv), so flags written for the Go simulator parse the same way.

The error texts are Go's own (`strconv.ParseInt: parsing "abc": invalid syntax`), because the
reference prints them verbatim and users grep for them.
"""

from __future__ import annotations

import decimal
import math
import re

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_BOOL_LITERALS = {
    "1": True,
    "t": True,
    "T": True,
    "TRUE": True,
    "true": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "FALSE": False,
    "false": False,
    "False": False,
}
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def go_quote(text: str) -> str:
    """Go's %q for a string: double quotes, backslash escapes for quotes and control bytes."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _syntax_error(func: str, text: str) -> ValueError:
    return ValueError(f"strconv.{func}: parsing {go_quote(text)}: invalid syntax")


def _range_error(func: str, text: str) -> ValueError:
    return ValueError(f"strconv.{func}: parsing {go_quote(text)}: value out of range")


def _underscores_ok(body: str, hex_digits: bool) -> bool:
    """Go's rule: an underscore must sit between two digits (or right after a base prefix)."""
    seen = "^"
    index = 0
    if len(body) >= 2 and body[0] == "0" and body[1].lower() in "box":
        index, seen = 2, "0"
    for char in body[index:]:
        if char.isascii() and (char.isdigit() or (hex_digits and char.lower() in "abcdef")):
            seen = "0"
        elif char == "_":
            if seen != "0":
                return False
            seen = "_"
        else:
            if seen == "_":
                return False
            seen = "!"
    return seen != "_"


def _split_base(body: str) -> tuple[int, str]:
    """Base-0 prefixes: 0x, 0o, 0b, and a bare leading 0 meaning octal."""
    if len(body) >= 2 and body[0] == "0":
        prefix = body[1].lower()
        if prefix == "x":
            return 16, body[2:]
        if prefix == "o":
            return 8, body[2:]
        if prefix == "b":
            return 2, body[2:]
        return 8, body[1:]
    return 10, body


def parse_go_int(text: str, bits: int = 64) -> int:
    """strconv.ParseInt(text, 0, bits)."""
    body = text[1:] if text[:1] in ("+", "-") else text
    base, digits = _split_base(body)
    if "_" in digits:
        if not _underscores_ok(body, base == 16):
            raise _syntax_error("ParseInt", text)
        digits = digits.replace("_", "")
    if not digits or any(_DIGITS.find(c.lower()) not in range(base) for c in digits):
        raise _syntax_error("ParseInt", text)
    value = int(digits, base)
    if text.startswith("-"):
        value = -value
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise _range_error("ParseInt", text)
    return value


def parse_go_float(text: str) -> float:
    """strconv.ParseFloat(text, 64) for the decimal and exponent forms (no hex floats)."""
    if _SPECIAL_FLOAT.fullmatch(text):
        return float(text.lower().replace("infinity", "inf"))
    if not _DECIMAL_FLOAT.fullmatch(text):
        raise _syntax_error("ParseFloat", text)
    value = float(text)
    if math.isinf(value):
        raise _range_error("ParseFloat", text)
    return value


def parse_go_bool(text: str) -> bool:
    """strconv.ParseBool."""
    if text not in _BOOL_LITERALS:
        raise _syntax_error("ParseBool", text)
    return _BOOL_LITERALS[text]


def is_go_bool(text: str) -> bool:
    return text in _BOOL_LITERALS


def format_go_float(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 64): shortest digits, exponent outside [1e-4, 1e6)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    parsed = decimal.Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, parsed.digits))
    exponent = len(digits) + int(parsed.exponent) - 1
    sign = "-" if parsed.sign else ""
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    if exponent + 1 >= len(digits):
        return sign + digits + "0" * (exponent + 1 - len(digits))
    return f"{sign}{digits[: exponent + 1]}.{digits[exponent + 1 :]}"
