"""Bounds on the work of one synthesis, so that no schema costs more than milliseconds.

Schemas come from clients, so a ~300-byte schema must not be able to freeze the server:

- `MAX_STRING_LENGTH` (1,000): no generated string is longer. A `minLength`, or a `pattern`
  whose shortest string is longer, is a `SynthesisError` naming the path and the limit.
  Pattern repetitions (`*`, `+`, `{n,m}`) stop expanding once the string reaches the limit.
- `MAX_ITEMS` (100): items per array. A `minItems` above it is a `SynthesisError`; drawn
  counts (and tuple lengths) are clamped to it.
- `MAX_PROPERTIES` (100): properties per object. More required properties (or a higher
  `minProperties`) is a `SynthesisError`; optional ones beyond it are left out.
- `MAX_NODES` (10,000): values generated in one synthesis, nested values, retries and the
  copied values of `const` and `enum` included (ten nested arrays of `minItems: 10` would
  need 10^10).
- `DEADLINE_SECONDS` (0.03): the last resort, in CPU time of the calling thread, with the
  garbage collector paused while a budget runs (so that neither other processes on a busy
  machine nor a collection of a large heap make a normal schema fail; the garbage of one
  bounded synthesis waits for the next collection). No `gc.callbacks` hook measures the
  collections instead: an interrupt (KeyboardInterrupt) raised while such a hook runs is
  swallowed by the collector, so Ctrl-C could be lost in any program importing this.
  Synthesis runs on the event loop, which must keep answering `/health` within 50 ms while
  the worst request runs; the heaviest schema of the test corpus takes about 3 ms (11 ms
  at worst, on a busy machine), so a schema past the deadline is not a legitimate one. The
  walk checks the clock at its loop heads (each value, each pattern attempt, each
  `$ref`/`allOf` step, each `anyOf` branch tried, each character a pattern check reads,
  every 64 atoms a pattern parse reads, every 1,024 automaton states built and values of
  one keyword read, see `paced`) and raises `SynthesisTooExpensive` past it. Steps between
  two checks are bounded by the other limits, so a synthesis overruns by at most a few ms.
- `MAX_CHECK_LENGTH` (1,000) and `MAX_PATTERN_STATES` (10,000): user regexes never run on
  Python's backtracking `re` (which `^(a+)+$` makes exponential). A value is checked
  against a `pattern` by the linear-time automaton of `pattern.pattern_search`; a string
  longer than `MAX_CHECK_LENGTH`, a pattern whose automaton would exceed
  `MAX_PATTERN_STATES`, or one with constructs the generator does not know (lookarounds,
  backreferences), is not checked and counts as matching (so such an `enum` value is kept).
- `MAX_PATTERN_LENGTH` (1,000 characters): a longer `pattern` is a `SynthesisError` when a
  string must be generated for it, and is not checked otherwise. It bounds the parse tree
  of a pattern (about 250 KiB at most); parse trees and automata are cached by pattern
  within `pattern.PATTERN_CACHE_BYTES` (8 MiB) of estimated memory. Python's `re` never
  compiles a client pattern, not even to report syntax errors (the parser does): its
  compilation cannot be interrupted (40 ms for some patterns of this length) and its
  cache of 512 compiled patterns is not bounded in bytes.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final, TypeVar

from .context import SynthesisError

MAX_STRING_LENGTH: Final = 1000
MAX_ITEMS: Final = 100
MAX_PROPERTIES: Final = 100
MAX_NODES: Final = 10_000
DEADLINE_SECONDS: Final = 0.03
MAX_CHECK_LENGTH: Final = 1000
MAX_PATTERN_STATES: Final = 10_000
MAX_PATTERN_LENGTH: Final = 1000

_T = TypeVar("_T")


class SynthesisTooExpensive(SynthesisError):
    """The work budget of one synthesis is spent; never retried with another branch."""


@dataclass(slots=True)
class _Budget:
    deadline: float  # in `_work_clock` seconds
    # In `time.perf_counter` seconds: before it, the deadline cannot have passed. The work
    # clock advances no faster than the wall clock, so most checks need only the cheap
    # wall clock, not the thread CPU clock (a system call of microseconds on some hosts).
    wall_limit: float
    nodes: int = 0


def _work_clock() -> float:
    return time.thread_time()


class _Scope:
    """What a `budgeted` block shares: its budget, made when its first synthesis starts,
    and whether it paused the garbage collector (resumed when the block ends)."""

    __slots__ = ("budget", "paused_gc")

    def __init__(self) -> None:
        self.budget: _Budget | None = None
        self.paused_gc = False


_CURRENT: ContextVar[_Scope | None] = ContextVar("schemagen_budget", default=None)


class budgeted:
    """Runs syntheses under a fresh node count and deadline, or under the enclosing one:
    every synthesis one request makes (a probe per tool, a call per tool) can share one
    budget, so a request with many tools costs no more than one with a single tool.

    Entering is cheap (no clock is read) since most requests that enter carry no schema."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _CURRENT.set(_Scope()) if _CURRENT.get() is None else None

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            scope = _CURRENT.get()
            _CURRENT.reset(self._token)
            if scope is not None and scope.paused_gc:
                gc.enable()


def start_budget() -> None:
    """Starts the deadline of the enclosing `budgeted` block, unless it has started."""
    scope = _CURRENT.get()
    if scope is not None and scope.budget is None:
        if gc.isenabled():  # no collection counts against the deadline (see DEADLINE_SECONDS)
            gc.disable()
            scope.paused_gc = True
        now = time.perf_counter()
        scope.budget = _Budget(_work_clock() + DEADLINE_SECONDS, now + DEADLINE_SECONDS)


def _budget() -> _Budget | None:
    scope = _CURRENT.get()
    return None if scope is None else scope.budget


def check_deadline(path: str = "$") -> None:
    budget = _budget()
    if budget is None:
        return
    now = time.perf_counter()
    if now < budget.wall_limit:
        return
    left = budget.deadline - _work_clock()
    if left < 0:
        limit = int(DEADLINE_SECONDS * 1000)
        raise SynthesisTooExpensive(
            f"schema too expensive to generate (over {limit} ms of CPU) at {path}"
        )
    budget.wall_limit = now + left


def paced(items: Iterable[_T], path: str = "$") -> Iterator[_T]:
    """`items`, with the deadline checked every 1,024 of them: for loops over the values of
    one keyword (`enum`, `properties`), which a client can make 100,000 long."""
    for count, item in enumerate(items):
        if count & 1023 == 1023:
            check_deadline(path)
        yield item


def count_value(path: str) -> None:
    """Counts one generated value against `MAX_NODES`, and checks the deadline."""
    budget = _budget()
    if budget is None:
        return
    budget.nodes += 1
    if budget.nodes > MAX_NODES:
        raise SynthesisTooExpensive(
            f"schema too expensive to generate (more than {MAX_NODES} values) at {path}"
        )
    check_deadline(path)


def shown(value: object) -> str:
    """`repr` of a keyword value for error messages, short even for huge integers."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
