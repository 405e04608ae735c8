"""Go `time.Duration` syntax and formatting, in integer nanoseconds.

Flags, YAML files and `/admin/config` exchange durations as Go writes them (`100ms`, `1.5s`,
`1h30m`), and the error texts are Go's (`time: missing unit in duration "100"`).
"""

from __future__ import annotations


class Duration(int):
    """A Go `time.Duration`: integer nanoseconds (so Go's arithmetic and bounds hold
    exactly), read in seconds where a timer or timeout wants them."""

    __slots__ = ()

    @property
    def seconds(self) -> float:
        return self / 1e9


_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_LIMIT = 1 << 63  # magnitude bound of an int64 (the negative side reaches it exactly)


def _quote(text: str) -> str:
    """Go's time.quote: ASCII kept, quotes and backslashes escaped, other bytes as \\xNN."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif " " <= char < "\x80":
            out.append(char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))
    out.append('"')
    return "".join(out)


def _invalid(orig: str) -> ValueError:
    return ValueError(f"time: invalid duration {_quote(orig)}")


def _leading_int(text: str, orig: str) -> tuple[int, str]:
    """Consume leading digits; overflow past 2^63 is an invalid duration, as in Go."""
    index, value = 0, 0
    while index < len(text) and "0" <= text[index] <= "9":
        value = value * 10 + ord(text[index]) - 48
        if value > _LIMIT:
            raise _invalid(orig)
        index += 1
    return value, text[index:]


def _leading_fraction(text: str) -> tuple[int, float, str]:
    """Consume fraction digits; digits beyond int64 precision are dropped, as Go does."""
    index, value, scale, overflow = 0, 0, 1.0, False
    while index < len(text) and "0" <= text[index] <= "9":
        if not overflow:
            candidate = value * 10 + ord(text[index]) - 48
            if value > _LIMIT // 10 or candidate > _LIMIT:
                overflow = True
            else:
                value, scale = candidate, scale * 10
        index += 1
    return value, scale, text[index:]


def _parse_part(text: str, orig: str) -> tuple[int, str]:
    """One `<decimal><unit>` component: returns its nanoseconds and the rest of the text."""
    if not (text[0] == "." or "0" <= text[0] <= "9"):
        raise _invalid(orig)
    whole, rest = _leading_int(text, orig)
    has_whole = len(rest) != len(text)
    fraction, scale, has_fraction = 0, 1.0, False
    if rest.startswith("."):
        fraction, scale, after = _leading_fraction(rest[1:])
        has_fraction = len(after) != len(rest) - 1
        rest = after
    if not (has_whole or has_fraction):
        raise _invalid(orig)
    end = 0
    while end < len(rest) and not (rest[end] == "." or "0" <= rest[end] <= "9"):
        end += 1
    if end == 0:
        raise ValueError(f"time: missing unit in duration {_quote(orig)}")
    unit_name, rest = rest[:end], rest[end:]
    unit = _UNITS.get(unit_name)
    if unit is None:
        raise ValueError(f"time: unknown unit {_quote(unit_name)} in duration {_quote(orig)}")
    if whole > _LIMIT // unit:
        raise _invalid(orig)
    # Go scales the fraction in float64; doing the same keeps results bit-identical.
    value = whole * unit + (int(fraction * (unit / scale)) if fraction else 0)
    if value > _LIMIT:
        raise _invalid(orig)
    return value, rest


def parse_duration(text: str) -> Duration:
    """time.ParseDuration: `[-+]?(<decimal><unit>)+` or a bare `0`, in nanoseconds."""
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return Duration(0)
    if not rest:
        raise _invalid(text)
    total = 0
    while rest:
        value, rest = _parse_part(rest, text)
        total += value
        if total > _LIMIT:
            raise _invalid(text)
    if negative:
        return Duration(-total)
    if total > _LIMIT - 1:
        raise _invalid(text)
    return Duration(total)


def _fraction(value: int, digits: int) -> str:
    """`value / 10**digits` with the trailing zeros (and a bare dot) removed."""
    whole, frac = divmod(value, 10**digits)
    text = str(frac).rjust(digits, "0").rstrip("0")
    return f"{whole}.{text}" if text else str(whole)


def format_duration(ns: int) -> str:
    """time.Duration.String(): `0s`, `250µs`, `1.5ms`, `1.5s`, `1m30s`, `2h0m0s`."""
    if ns == 0:
        return "0s"
    sign, value = ("-" if ns < 0 else ""), abs(ns)
    if value < 1_000:
        return f"{sign}{value}ns"
    if value < 1_000_000:
        return f"{sign}{_fraction(value, 3)}µs"
    if value < 1_000_000_000:
        return f"{sign}{_fraction(value, 6)}ms"
    seconds = _fraction(value % 60_000_000_000, 9) + "s"
    minutes, hours = (value // 60_000_000_000) % 60, value // 3_600_000_000_000
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds
