"""A small regex engine for `pattern`: a parser into a tree, and an emitter of strings.

It knows literals, `.`, classes (`[A-Z]`, `[^...]`, `\\d`, `\\w`, `\\s`, ...), groups,
alternation, quantifiers and anchors; anything else raises `PatternUnsupported`. Anchors
and word boundaries emit nothing: callers check every string with `pattern_search`.

Patterns come from clients, so their parse trees and automata are cached within a memory
budget (`PATTERN_CACHE_BYTES`), and a pattern longer than `MAX_PATTERN_LENGTH` is neither
parsed nor cached.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from .limits import MAX_CHECK_LENGTH, MAX_PATTERN_LENGTH, MAX_PATTERN_STATES, check_deadline
from .lru import SizedLru

REPEAT_SPREAD: Final = 4  # extra repetitions of `*`, `+`, `{n,}` beyond the minimum
_PRINTABLE: Final = ((0x20, 0x7E),)  # the universe for negated classes and `.`


class PatternUnsupported(Exception):
    """A regex construct the generator cannot produce strings for."""


class PatternInvalid(PatternUnsupported):
    """Not a regular expression at all: a syntax error, as Python's `re` would report it."""


# How a class matches (as Python's `re` reads it, Unicode included): negated, its explicit
# ranges, and its category escapes (`d`, `w`, `s`, `D`, `W`, `S`).
_Test = tuple[bool, tuple[tuple[int, int], ...], str]


@dataclass(frozen=True, slots=True)
class _Chars:
    ranges: tuple[tuple[int, int], ...]  # inclusive code-point ranges, picked uniformly
    test: _Test | None = None  # for matching; None: exactly `ranges`


@dataclass(frozen=True, slots=True)
class _Anchor:
    kind: str  # "^", "$", "A", "Z", "b", "B": zero-width, emits nothing


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
    empty: bool  # `node` never emits a character (`(^){1000000000}`), known when parsed


Node = _Chars | _Seq | _Alt | _Repeat | _Anchor
_DIGITS: Final = ((0x30, 0x39),)
_WORD: Final = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Final = ((0x20, 0x20),)
_DOT: Final = ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A))  # readable characters for `.`
_QUANTIFIER: Final = re.compile(r"\{(\d*)(,?)(\d*)\}")
_SIMPLE_QUANTIFIERS: Final = {"*": (0, None), "+": (1, None), "?": (0, 1)}
_CONTROL_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_ZERO_WIDTH_ESCAPES: Final = {"b": "b", "B": "B", "A": "A", "Z": "Z", "z": "Z"}
_NOT_NEWLINE: Final[_Test] = (True, ((0x0A, 0x0A),), "")
_HUGE_COUNT: Final = 10**9  # repeat counts beyond this are read as this (never emitted)
_HEX_WIDTHS: Final = {"x": 2, "u": 4, "U": 8}


def parse_pattern(pattern: str) -> Node:
    """The tree of `pattern`; raises `PatternUnsupported` for constructs it cannot emit
    and for a pattern longer than `MAX_PATTERN_LENGTH`."""
    return _compiled(pattern).tree


class _PatternParser:
    def __init__(self, pattern: str) -> None:
        self._text = pattern
        self._pos = 0

    def parse(self) -> Node:
        node = self._alternation()
        if self._pos != len(self._text):
            raise PatternInvalid(f"unexpected {self._text[self._pos]!r}")
        return node

    def _peek(self) -> str:
        return self._text[self._pos] if self._pos < len(self._text) else ""

    def _next(self) -> str:
        if self._pos >= len(self._text):
            raise PatternInvalid("unexpected end")
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
            if len(items) % 64 == 63:
                check_deadline()
            items.append(self._quantified(self._atom()))
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def _atom(self) -> Node:
        char = self._next()
        if char == "(":
            self._group_prefix()
            node = self._alternation()
            if self._next() != ")":
                raise PatternInvalid("unbalanced group")
            return node
        if char == "[":
            return self._char_class()
        if char == ".":
            return _Chars(_DOT, _NOT_NEWLINE)
        if char in "^$":
            return _Anchor(char)
        if char == "\\":
            return self._escape(in_class=False)
        if char in "*+?":
            raise PatternInvalid("nothing to repeat")
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
            least = _count(match.group(1) or "0")
            most = least  # `{n}`; `{n,}` is unbounded, `{n,m}`, `{,m}` bounded
            if match.group(2):
                most = _count(match.group(3)) if match.group(3) else None
            if most is not None and most < least:
                raise PatternInvalid("quantifier range is reversed")
            self._pos = match.end()
        else:
            return node
        if self._peek() in ("?", "+"):  # lazy and possessive forms generate the same strings
            self._pos += 1
        return _Repeat(node, least, most, _always_empty(node))

    def _escape(self, *, in_class: bool) -> _Chars | _Anchor:
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
            return _Chars(sets[char], (False, (), char))
        if char in _CONTROL_ESCAPES:
            return _literal(_CONTROL_ESCAPES[char])
        if char in _ZERO_WIDTH_ESCAPES and not in_class:
            return _Anchor(_ZERO_WIDTH_ESCAPES[char])
        if char == "b":  # inside a class, \b is a backspace
            return _literal("\b")
        if char.isdigit():
            raise PatternUnsupported("backreferences and octal escapes are not supported")
        if char in _HEX_WIDTHS:
            width = _HEX_WIDTHS[char]
            digits = self._text[self._pos : self._pos + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PatternInvalid(f"bad \\{char} escape")
            self._pos += width
            return _literal(chr(int(digits, 16)))
        if char == "N":  # a named character: valid, but not known here
            raise PatternUnsupported("escape \\N is not supported")
        if char.isalpha():
            raise PatternInvalid(f"bad escape \\{char}")
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
        explicit: list[tuple[int, int]] = []  # for matching: ranges without category sets
        categories = ""
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
                    if escaped.test is not None:
                        categories += escaped.test[2]
                    continue
                start = escaped.ranges[0][0]
            else:
                start = ord(char)
            ranges.append((start, self._range_end(start)))
            explicit.append(ranges[-1])
        result = tuple(ranges)
        if negate:
            result = _complement(result)
        if not result:
            raise PatternUnsupported("empty character class")
        return _Chars(result, (negate, tuple(explicit), categories))

    def _range_end(self, start: int) -> int:
        """The end of a class range `a-z` starting at `start`; `start` itself if none."""
        if self._peek() != "-" or self._text[self._pos + 1 : self._pos + 2] in ("", "]"):
            return start
        self._pos += 1
        high = self._next()
        end = self._class_escape().ranges[0][0] if high == "\\" else ord(high)
        if end < start:
            raise PatternInvalid("bad character range")
        return end


def _count(digits: str) -> int:
    """A repeat count; a huge one (too long to convert) is read as `_HUGE_COUNT`."""
    return _HUGE_COUNT if len(digits) > 9 else int(digits)


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


class PatternTooLong(Exception):
    """`emit` reached its `limit` of characters."""


def emit(node: Node, rng: random.Random, out: list[str], boost: int, limit: int) -> None:
    """Appends one string of `node` to `out`. A positive `boost` repeats unbounded and wide
    quantifiers more often, a negative one less, so callers can steer the length. Raises
    `PatternTooLong` once `out` holds more than `limit` characters."""
    if isinstance(node, _Chars):
        if len(out) >= limit:
            raise PatternTooLong
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
            emit(item, rng, out, boost, limit)
    elif isinstance(node, _Alt):
        emit(rng.choice(node.options), rng, out, boost, limit)
    elif isinstance(node, _Repeat):
        if node.empty:
            return  # `(^){1000000000}`: nothing to emit, however many times
        for count in range(_repeat_count(node, rng, boost)):
            if count % 1024 == 1023:
                check_deadline()
            emit(node.node, rng, out, boost, limit)
    # An _Anchor emits nothing.


def _always_empty(node: Node) -> bool:
    """Whether `node` never emits a character; a repeat's own flag ends the descent, so
    the parser computes it for each quantifier in time linear in the pattern."""
    if isinstance(node, _Chars):
        return False
    if isinstance(node, _Seq):
        return all(_always_empty(item) for item in node.items)
    if isinstance(node, _Alt):
        return all(_always_empty(option) for option in node.options)
    if isinstance(node, _Repeat):
        return node.most == 0 or node.empty
    return True


def min_length(node: Node) -> int:
    """The length of the shortest string of `node`."""
    if isinstance(node, _Chars):
        return 1
    if isinstance(node, _Seq):
        return sum(min_length(item) for item in node.items)
    if isinstance(node, _Alt):
        return min(min_length(option) for option in node.options)
    if isinstance(node, _Repeat):
        return node.least * min_length(node.node) if node.least else 0
    return 0


def _repeat_count(node: _Repeat, rng: random.Random, boost: int) -> int:
    span = None if node.most is None else node.most - node.least
    if span is not None and span <= REPEAT_SPREAD and boost == 0:
        return rng.randint(node.least, node.least + span)
    extra_low, extra_high = max(0, boost), max(0, boost + REPEAT_SPREAD)
    if span is not None:
        extra_low, extra_high = min(extra_low, span), min(extra_high, span)
    return node.least + rng.randint(extra_low, extra_high)


# ---- matching --------------------------------------------------------------------------
# `re.search` semantics for the parsed subset, by a Thompson automaton: the set of live
# states advances one character at a time, so a check costs O(len(text) * states) whatever
# the pattern (no backtracking, so `^(a+)+$` is as cheap as `^a+$`).

_CHAR, _SPLIT, _ASSERT, _MATCH = range(4)


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


_CATEGORIES: Final[dict[str, Callable[[str], bool]]] = {
    "d": str.isdecimal,
    "D": lambda char: not char.isdecimal(),
    "w": _is_word_char,
    "W": lambda char: not _is_word_char(char),
    "s": str.isspace,
    "S": lambda char: not char.isspace(),
}


class _TooBig(Exception):
    """The automaton would have more than `MAX_PATTERN_STATES` states."""


@dataclass(slots=True)
class _Automaton:
    kind: list[int]
    arg: list[object]  # the _Chars of a character state, the kind of an assertion
    out1: list[int]
    out2: list[int]
    start: int = 0

    def add(self, kind: int, arg: object, out1: int, out2: int = -1) -> int:
        if len(self.kind) >= MAX_PATTERN_STATES:
            raise _TooBig
        if len(self.kind) % 1024 == 1023:
            check_deadline()
        self.kind.append(kind)
        self.arg.append(arg)
        self.out1.append(out1)
        self.out2.append(out2)
        return len(self.kind) - 1

    def build(self, node: Node, after: int) -> int:
        """Adds the states of `node`, continuing with `after`; returns the entry state."""
        if isinstance(node, _Chars):
            return self.add(_CHAR, node, after)
        if isinstance(node, _Anchor):
            return self.add(_ASSERT, node.kind, after)
        if isinstance(node, _Seq):
            for item in reversed(node.items):
                after = self.build(item, after)
            return after
        if isinstance(node, _Alt):
            entries = [self.build(option, after) for option in node.options]
            entry = entries[-1]
            for other in reversed(entries[:-1]):
                entry = self.add(_SPLIT, None, other, entry)
            return entry
        return self._repeat(node, after)

    def _repeat(self, node: _Repeat, after: int) -> int:
        if node.empty:  # assertions hold or not, however often repeated
            entry = self.build(node.node, after)
            return entry if node.least else self.add(_SPLIT, None, entry, after)
        if node.most is None:
            loop = self.add(_SPLIT, None, -1, after)
            self.out1[loop] = self.build(node.node, loop)
            tail = loop
        else:
            tail = after
            for _ in range(node.most - node.least):
                tail = self.add(_SPLIT, None, self.build(node.node, tail), after)
        for _ in range(node.least):
            tail = self.build(node.node, tail)
        return tail


def _char_ok(node: _Chars, char: str) -> bool:
    code = ord(char)
    if node.test is None:
        return any(low <= code <= high for low, high in node.ranges)
    negate, ranges, categories = node.test
    hit = any(low <= code <= high for low, high in ranges) or any(
        _CATEGORIES[name](char) for name in categories
    )
    return hit != negate


def _holds(kind: object, text: str, pos: int) -> bool:
    end = len(text)
    if kind in ("^", "A"):
        return pos == 0
    if kind == "$":
        return pos == end or (pos == end - 1 and text[-1] == "\n")
    if kind == "Z":
        return pos == end
    before = pos > 0 and _is_word_char(text[pos - 1])
    after = pos < end and _is_word_char(text[pos])
    return (before != after) == (kind == "b")


@dataclass(frozen=True, slots=True)
class _Compiled:
    tree: Node
    automaton: _Automaton | None  # None: over MAX_PATTERN_STATES, not checkable
    shortest: int  # the length of the shortest match


# Memory estimates, measured with tracemalloc at their worst (see the unit tests): a parse
# tree takes up to 240 bytes per pattern character (`\W\W...`: five ranges each); an
# automaton state up to 88 bytes (four list slots, two int objects); the entry itself, its
# four lists and its cache slot about 600 bytes. Rounded up.
_TREE_BYTES_PER_CHAR: Final = 256
_BYTES_PER_STATE: Final = 96
_ENTRY_BYTES: Final = 1024
PATTERN_CACHE_BYTES: Final = 8 * 1024 * 1024
_CACHE: Final = SizedLru[str, _Compiled](PATTERN_CACHE_BYTES)


def _compiled(pattern: str) -> _Compiled:
    """The tree, automaton and shortest match of `pattern`, cached; raises
    `PatternUnsupported` or `PatternInvalid` (not cached: parsing fails no later than it
    would succeed). Python's `re` never compiles a client pattern: its compilation cannot
    be interrupted (tens of ms for some of 1,000 characters) and its cache is not ours."""
    entry = _CACHE.get(pattern)
    if entry is not None:
        return entry
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternUnsupported(f"longer than {MAX_PATTERN_LENGTH} characters")
    try:
        tree = _PatternParser(pattern).parse()
    except RecursionError:
        raise PatternUnsupported("groups nested too deeply") from None
    automaton = _automaton(tree)
    entry = _Compiled(tree, automaton, min_length(tree))
    states = 0 if automaton is None else len(automaton.kind)
    size = sys.getsizeof(pattern) + _TREE_BYTES_PER_CHAR * len(pattern)
    _CACHE.put(pattern, entry, size + _BYTES_PER_STATE * states + _ENTRY_BYTES)
    return entry


def _automaton(tree: Node) -> _Automaton | None:
    """The automaton of `tree`; None if it would exceed `MAX_PATTERN_STATES`."""
    automaton = _Automaton([], [], [], [])
    try:
        automaton.start = automaton.build(tree, automaton.add(_MATCH, None, -1))
    except _TooBig:
        return None
    return automaton


def pattern_search(pattern: str, text: str) -> bool:
    """Whether `re.search(pattern, text)` finds a match, in time linear in `text`. Not
    checked, and so True: a text longer than `MAX_CHECK_LENGTH`, a pattern the parser
    does not know, longer than `MAX_PATTERN_LENGTH`, or whose automaton exceeds
    `MAX_PATTERN_STATES` (unless the text is shorter than the pattern's shortest match)."""
    try:
        compiled = _compiled(pattern)
    except PatternUnsupported:
        return True
    if compiled.shortest > len(text):
        return False
    automaton = compiled.automaton
    if automaton is None or len(text) > MAX_CHECK_LENGTH:
        return True
    live: list[int] = []
    seen: set[int] = set()
    for pos in range(len(text) + 1):
        check_deadline()  # a step costs up to the number of states: milliseconds
        if _closure(automaton, [automaton.start], text, pos, seen, live):
            return True
        if pos == len(text):
            break
        char = text[pos]
        moved = [automaton.out1[s] for s in live if _char_ok(_chars(automaton, s), char)]
        live, seen = [], set()
        if _closure(automaton, moved, text, pos + 1, seen, live):
            return True
    return False


def _chars(automaton: _Automaton, state: int) -> _Chars:
    node = automaton.arg[state]
    assert isinstance(node, _Chars)
    return node


def _closure(
    automaton: _Automaton, states: list[int], text: str, pos: int, seen: set[int], live: list[int]
) -> bool:
    """Adds the character states reachable from `states` at `pos` to `live`; True if the
    match state is reachable."""
    stack = list(reversed(states))
    kind, arg, out1, out2 = automaton.kind, automaton.arg, automaton.out1, automaton.out2
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        what = kind[state]
        if what == _MATCH:
            return True
        if what == _SPLIT:
            stack.extend((out2[state], out1[state]))
        elif what == _ASSERT:
            if _holds(arg[state], text, pos):
                stack.append(out1[state])
        else:
            live.append(state)
    return False
