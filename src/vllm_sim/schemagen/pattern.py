"""A small regex engine for `pattern`: a parser into a tree, and an emitter of strings.

It knows literals, `.`, classes (`[A-Z]`, `[^...]`, `\\d`, `\\w`, `\\s`, ...), groups,
alternation, quantifiers and anchors; anything else raises `PatternUnsupported`. Anchors
and word boundaries emit nothing: callers check every string with `re.search`.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

REPEAT_SPREAD: Final = 4  # extra repetitions of `*`, `+`, `{n,}` beyond the minimum
_PRINTABLE: Final = ((0x20, 0x7E),)  # the universe for negated classes and `.`


class PatternUnsupported(Exception):
    """A regex construct the generator cannot produce strings for."""


@dataclass(frozen=True, slots=True)
class _Chars:
    ranges: tuple[tuple[int, int], ...]  # inclusive code-point ranges, picked uniformly


@dataclass(frozen=True, slots=True)
class _Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class _Alt:
    options: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class _Repeat:
    node: Node
    least: int
    most: int | None  # None: unbounded


Node = _Chars | _Seq | _Alt | _Repeat
_EMPTY: Final = _Seq(())  # anchors and word boundaries: zero-width, checked by re.search
_DIGITS: Final = ((0x30, 0x39),)
_WORD: Final = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Final = ((0x20, 0x20),)
_DOT: Final = ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A))  # readable characters for `.`
_QUANTIFIER: Final = re.compile(r"\{(\d*)(,?)(\d*)\}")
_SIMPLE_QUANTIFIERS: Final = {"*": (0, None), "+": (1, None), "?": (0, 1)}
_CONTROL_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_ZERO_WIDTH_ESCAPES: Final = frozenset("bBAZz")
_HEX_WIDTHS: Final = {"x": 2, "u": 4, "U": 8}


@functools.lru_cache(maxsize=256)
def parse_pattern(pattern: str) -> Node:
    """The tree of `pattern`; raises `PatternUnsupported` for constructs it cannot emit."""
    return _PatternParser(pattern).parse()


class _PatternParser:
    def __init__(self, pattern: str) -> None:
        self._text = pattern
        self._pos = 0

    def parse(self) -> Node:
        node = self._alternation()
        if self._pos != len(self._text):
            raise PatternUnsupported(f"unexpected {self._text[self._pos]!r}")
        return node

    def _peek(self) -> str:
        return self._text[self._pos] if self._pos < len(self._text) else ""

    def _next(self) -> str:
        if self._pos >= len(self._text):
            raise PatternUnsupported("unexpected end")
        char = self._text[self._pos]
        self._pos += 1
        return char

    def _alternation(self) -> Node:
        options = [self._sequence()]
        while self._peek() == "|":
            self._pos += 1
            options.append(self._sequence())
        return options[0] if len(options) == 1 else _Alt(tuple(options))

    def _sequence(self) -> Node:
        items: list[Node] = []
        while self._peek() not in ("", "|", ")"):
            items.append(self._quantified(self._atom()))
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def _atom(self) -> Node:
        char = self._next()
        if char == "(":
            self._group_prefix()
            node = self._alternation()
            if self._next() != ")":
                raise PatternUnsupported("unbalanced group")
            return node
        if char == "[":
            return self._char_class()
        if char == ".":
            return _Chars(_DOT)
        if char in "^$":
            return _EMPTY
        if char == "\\":
            return self._escape(in_class=False)
        if char in "*+?":
            raise PatternUnsupported("nothing to repeat")
        return _literal(char)

    def _group_prefix(self) -> None:
        if self._peek() != "?":
            return
        rest = self._text[self._pos :]
        if rest.startswith("?:"):
            self._pos += 2
            return
        named = re.match(r"\?P?<([A-Za-z_]\w*)>", rest)
        if named:
            self._pos += named.end()
            return
        raise PatternUnsupported("lookarounds and inline flags are not supported")

    def _quantified(self, node: Node) -> Node:
        char = self._peek()
        if char in _SIMPLE_QUANTIFIERS:
            least, most = _SIMPLE_QUANTIFIERS[char]
            self._pos += 1
        elif char == "{":
            match = _QUANTIFIER.match(self._text, self._pos)
            if not match or not (match.group(1) or match.group(3)):
                return node  # Python reads a malformed `{...}` literally
            least = int(match.group(1) or 0)
            most = least  # `{n}`; `{n,}` is unbounded, `{n,m}` and `{,m}` bounded
            if match.group(2):
                most = int(match.group(3)) if match.group(3) else None
            if most is not None and most < least:
                raise PatternUnsupported("quantifier range is reversed")
            self._pos = match.end()
        else:
            return node
        if self._peek() in ("?", "+"):  # lazy and possessive forms generate the same strings
            self._pos += 1
        return _Repeat(node, least, most)

    def _escape(self, *, in_class: bool) -> _Chars | _Seq:
        char = self._next()
        sets = {
            "d": _DIGITS,
            "w": _WORD,
            "s": _SPACE,
            "D": _complement(_DIGITS),
            "W": _complement(_WORD),
            "S": _complement(_SPACE),
        }
        if char in sets:
            return _Chars(sets[char])
        if char in _CONTROL_ESCAPES:
            return _literal(_CONTROL_ESCAPES[char])
        if char in _ZERO_WIDTH_ESCAPES and not in_class:
            return _EMPTY
        if char == "b":  # inside a class, \b is a backspace
            return _literal("\b")
        if char.isdigit():
            raise PatternUnsupported("backreferences and octal escapes are not supported")
        if char in _HEX_WIDTHS:
            width = _HEX_WIDTHS[char]
            digits = self._text[self._pos : self._pos + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PatternUnsupported(f"bad \\{char} escape")
            self._pos += width
            return _literal(chr(int(digits, 16)))
        if char.isalpha():
            raise PatternUnsupported(f"escape \\{char} is not supported")
        return _literal(char)

    def _class_escape(self) -> _Chars:
        escaped = self._escape(in_class=True)
        assert isinstance(escaped, _Chars)
        return escaped

    def _char_class(self) -> Node:
        negate = self._peek() == "^"
        if negate:
            self._pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            char = self._next()
            if char == "]" and not first:
                break
            first = False
            if char == "\\":
                escaped = self._class_escape()
                if len(escaped.ranges) != 1 or escaped.ranges[0][0] != escaped.ranges[0][1]:
                    ranges.extend(escaped.ranges)  # a set like \d: cannot start a range
                    continue
                start = escaped.ranges[0][0]
            else:
                start = ord(char)
            ranges.append((start, self._range_end(start)))
        result = tuple(ranges)
        if negate:
            result = _complement(result)
        if not result:
            raise PatternUnsupported("empty character class")
        return _Chars(result)

    def _range_end(self, start: int) -> int:
        """The end of a class range `a-z` starting at `start`; `start` itself if none."""
        if self._peek() != "-" or self._text[self._pos + 1 : self._pos + 2] in ("", "]"):
            return start
        self._pos += 1
        high = self._next()
        end = self._class_escape().ranges[0][0] if high == "\\" else ord(high)
        if end < start:
            raise PatternUnsupported("bad character range")
        return end


def _literal(char: str) -> _Chars:
    return _Chars(((ord(char), ord(char)),))


def _complement(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Printable ASCII characters outside `ranges` (negated classes stay readable)."""
    excluded = sorted(ranges)
    result: list[tuple[int, int]] = []
    for low, high in _PRINTABLE:
        current = low
        for start, end in excluded:
            if end < current or start > high:
                continue
            if start > current:
                result.append((current, start - 1))
            current = max(current, end + 1)
        if current <= high:
            result.append((current, high))
    return tuple(result)


def emit(node: Node, rng: random.Random, out: list[str], boost: int) -> None:
    """Appends one string of `node` to `out`. A positive `boost` repeats unbounded and wide
    quantifiers more often, a negative one less, so callers can steer the length."""
    if isinstance(node, _Chars):
        total = sum(end - start + 1 for start, end in node.ranges)
        pick = rng.randrange(total)
        for start, end in node.ranges:
            size = end - start + 1
            if pick < size:
                out.append(chr(start + pick))
                return
            pick -= size
    elif isinstance(node, _Seq):
        for item in node.items:
            emit(item, rng, out, boost)
    elif isinstance(node, _Alt):
        emit(rng.choice(node.options), rng, out, boost)
    else:
        for _ in range(_repeat_count(node, rng, boost)):
            emit(node.node, rng, out, boost)


def _repeat_count(node: _Repeat, rng: random.Random, boost: int) -> int:
    span = None if node.most is None else node.most - node.least
    if span is not None and span <= REPEAT_SPREAD and boost == 0:
        return rng.randint(node.least, node.least + span)
    extra_low, extra_high = max(0, boost), max(0, boost + REPEAT_SPREAD)
    if span is not None:
        extra_low, extra_high = min(extra_low, span), min(extra_high, span)
    return node.least + rng.randint(extra_low, extra_high)
