"""Hypothesis settings and JSON strategies shared by the fuzz suites.

Beyond plain JSON values, bodies can carry what `json.dumps` cannot write: `Raw` text spliced
verbatim (NaN, lone surrogates, 1,000 levels of nesting, invalid UTF-8) and `Pairs`, an
object whose keys may repeat. `encode` writes such a body; `mutated` takes a strategy of
valid bodies and breaks one to three places of each, so that most examples get past the
decoder and reach the code behind it.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Examples per route of the tests/fuzz suite; `make fuzz` sets it to 10,000.
FUZZ_EXAMPLES_ENV = "VLLM_SIM_FUZZ_EXAMPLES"
CI_EXAMPLES = 80


def fuzz_settings(max_examples: int, *suppress: HealthCheck) -> settings:
    """No deadline, no example database (keeps the repository free of .hypothesis/)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, *suppress],
    )


def examples_per_route() -> int:
    """FUZZ_EXAMPLES_ENV when set, else the small count CI runs."""
    raw = os.environ.get(FUZZ_EXAMPLES_ENV, "").strip()
    return int(raw) if raw else CI_EXAMPLES


def route_settings() -> settings:
    """The settings of one route's fuzz test: big generated bodies are the point."""
    return fuzz_settings(
        examples_per_route(),
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    )


def json_scalars(text_size: int, *extra: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """null, booleans, integers beyond 64 bits, `extra`, finite floats, short strings."""
    strategy: st.SearchStrategy[Any] = (
        st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    )
    for more in extra:
        strategy = strategy | more
    return strategy | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=text_size)


def json_trees(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Small JSON documents (lists and objects up to 4 wide, 12 leaves) over `scalars`."""
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        ),
        max_leaves=12,
    )


# ------------------------------------------------------------------ raw JSON text


@dataclass(frozen=True, slots=True)
class Raw:
    """JSON text written into a body as it is: what json.dumps refuses or cannot make."""

    text: bytes


@dataclass(frozen=True, slots=True)
class Pairs:
    """A JSON object written pair by pair, so that a key may appear twice."""

    items: tuple[tuple[str, Any], ...]


def encode(value: Any) -> bytes:
    """The JSON text of `value`, with its Raw parts verbatim and its Pairs in order."""
    out: list[bytes] = []
    _write(value, out)
    return b"".join(out)


def _write(value: Any, out: list[bytes]) -> None:
    if isinstance(value, Raw):
        out.append(value.text)
    elif isinstance(value, Pairs | dict):
        items = value.items if isinstance(value, Pairs) else tuple(value.items())
        out.append(b"{")
        for index, (key, item) in enumerate(items):
            out.append(b"," if index else b"")
            out.append(_dumps(key) + b":")
            _write(item, out)
        out.append(b"}")
    elif isinstance(value, list | tuple):
        out.append(b"[")
        for index, item in enumerate(value):
            out.append(b"," if index else b"")
            _write(item, out)
        out.append(b"]")
    else:
        out.append(_dumps(value))


def _dumps(value: Any) -> bytes:
    # Non-ASCII text goes out as UTF-8, not \u escapes: the server's decoder must read both.
    return json.dumps(value, ensure_ascii=False).encode()


# ------------------------------------------------------------------ edge values


def pick(values: Sequence[Any]) -> st.SearchStrategy[Any]:
    """sampled_from for big values: a failing example shows them, the strategy's repr (which
    hypothesis builds eagerly) does not."""
    return st.integers(0, len(values) - 1).map(values.__getitem__)


EDGE_INTS = (
    0,
    -1,
    1,
    2,
    255,
    2**31 - 1,
    2**31,
    2**32,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**400,
    -(10**400),
)
# Counts a client may legitimately ask for that are far beyond what a test needs: each must
# be served or refused with a 400, quickly (n, max_tokens, top_logprobs, dimensions ...).
LARGE_COUNTS = (16, 20, 21, 64, 128, 256, 1000, 1024, 4096, 10**5, 10**6, 10**9)
EDGE_FLOATS = (0.0, -0.0, 0.5, 1.0, 1e-300, 5e-324, 1e308, -1e308, 2.5, -2.5)
RAW_SCALARS = tuple(
    Raw(text)
    for text in (
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"1e999",
        b"-1e999",
        b"1E400",
        b"-0",
        b"0e0",
        b"1.0e-999",
        b"1" + b"0" * 5000,  # an integer of 5,001 digits, past Python's int-to-str limit
        b'"\\ud800"',  # lone high surrogate
        b'"a\\udc00b"',  # lone low surrogate
        b'"\\udc00\\ud800"',  # a pair in the wrong order
        b'"\\u0000"',
        b'"\xff\xfe"',  # invalid UTF-8
        b'"\xed\xa0\x80"',  # a surrogate encoded as UTF-8 (invalid)
        b'"\xc0\xaf"',  # an overlong encoding
    )
)
LONG_STRINGS = ("x" * 4096, "é" * 2000, "\u0000" * 16, "\U0001f4a5" * 1000, " " * 3000, "\n" * 500)
NESTING_DEPTHS = (64, 256, 999, 1000, 1001, 1500)


def nested(depth: int, kind: str) -> Raw:
    """`depth` levels of arrays or of objects, as text (no recursion anywhere here)."""
    if kind == "array":
        return Raw(b"[" * depth + b"]" * depth)
    return Raw(b'{"a":' * depth + b"1" + b"}" * depth)


def deep_values() -> st.SearchStrategy[Raw]:
    return st.builds(nested, st.sampled_from(NESTING_DEPTHS), st.sampled_from(["array", "object"]))


def duplicate_keys(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Pairs]:
    """A small object with one key twice, its values differing."""
    return st.tuples(st.text(max_size=8), values, values).map(
        lambda t: Pairs(((t[0], t[1]), (t[0], t[2])))
    )


def junk(text_size: int = 12) -> st.SearchStrategy[Any]:
    """Any value a field should not have: wrong types, edge numbers, raw text, deep nesting."""
    trees = json_trees(json_scalars(text_size))
    return st.one_of(
        trees,
        st.sampled_from(EDGE_INTS + EDGE_FLOATS + LARGE_COUNTS),
        pick(RAW_SCALARS),
        pick(LONG_STRINGS),
        deep_values(),
        duplicate_keys(trees),
    )


# Deferred: its repr stays one line (hypothesis renders the repr of every strategy it is
# given, and the whole tree of junk runs to tens of kilobytes).
JUNK = st.deferred(junk)


def counts(*valid: int) -> st.SearchStrategy[Any]:
    """An integer field's values: the usual ones, edges, large counts and junk."""
    usual = st.sampled_from(valid) if valid else st.integers(0, 4)
    return st.one_of(
        usual,
        st.sampled_from(EDGE_INTS + LARGE_COUNTS),
        st.integers(-3, 30),
        st.sampled_from([Raw(b"1.0"), Raw(b"1e2"), Raw(b"2.5"), Raw(b"NaN")]),
        JUNK,
    )


def flags() -> st.SearchStrategy[Any]:
    """A boolean field's values, and what is almost one."""
    return st.booleans() | st.sampled_from([0, 1, "true", "false", None, Raw(b"tru")]) | JUNK


# ------------------------------------------------------------------ mutation

Path = tuple[str | int, ...]


def _paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every node below `value` (not through Raw or Pairs), parents before children."""
    if isinstance(value, dict):
        children: Iterator[tuple[str | int, Any]] = iter(value.items())
    elif isinstance(value, list):
        children = enumerate(value)
    else:
        return
    for key, child in children:
        yield (*prefix, key)
        yield from _paths(child, (*prefix, key))


def _node(root: Any, path: Path) -> Any:
    for key in path:
        root = root[key]
    return root


def _objects(root: Any) -> list[Path]:
    """The paths of every object in `root`, itself included."""
    found: list[Path] = [()] if isinstance(root, dict) else []
    return found + [path for path in _paths(root) if isinstance(_node(root, path), dict)]


MUTATIONS = ("field", "field", "field", "node", "node", "delete", "unknown", "duplicate", "root")


def _mutate(
    draw: st.DrawFn, body: Any, fields: Mapping[str, st.SearchStrategy[Any]], bad: Any
) -> Any:
    """`body` with one thing broken; a mutation that has nothing to work on leaves it."""
    kind = draw(st.sampled_from(MUTATIONS))
    if kind == "root":
        return _fresh(draw, bad)
    if kind == "field" and isinstance(body, dict) and fields:
        name = draw(st.sampled_from(sorted(fields)))
        body[name] = _fresh(draw, fields[name])
        return body
    paths = list(_paths(body))
    objects = _objects(body)
    if kind == "node" and paths:
        path = draw(st.sampled_from(paths))
        _node(body, path[:-1])[path[-1]] = _fresh(draw, bad)
    elif kind == "delete":
        keys = [path for path in paths if isinstance(_node(body, path[:-1]), dict)]
        if keys:
            path = draw(st.sampled_from(keys))
            del _node(body, path[:-1])[path[-1]]
    elif kind == "unknown" and objects:
        target = _node(body, draw(st.sampled_from(objects)))
        target[draw(st.text(max_size=12))] = _fresh(draw, bad)
    elif kind == "duplicate" and objects:
        body = _duplicate(draw, body, draw(st.sampled_from(objects)), bad)
    return body


def _fresh(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> Any:
    """A drawn value of its own: `just` and `sampled_from` hand out the same object every
    time, and a later mutation that edits it in place would change what they draw next
    (hypothesis then sees inconsistent data generation)."""
    return copy.deepcopy(draw(values))


def _duplicate(draw: st.DrawFn, body: Any, path: Path, bad: Any) -> Any:
    """The object at `path` as Pairs with one key repeated, junk first or last."""
    target: dict[str, Any] = _node(body, path)
    key = draw(st.sampled_from(sorted(target))) if target else "model"
    items = tuple(target.items())
    extra = ((key, _fresh(draw, bad)),)
    pairs = Pairs(extra + items if draw(st.booleans()) else items + extra)
    if not path:
        return pairs
    _node(body, path[:-1])[path[-1]] = pairs
    return body


@st.composite
def mutated(
    draw: st.DrawFn,
    valid: st.SearchStrategy[dict[str, Any]],
    fields: Mapping[str, st.SearchStrategy[Any]],
) -> Any:
    """A valid body with zero to three things broken: a known field set to an edge value,
    any node replaced by junk, a key deleted, an unknown key added, a key duplicated."""
    # A copy: sampled_from and just hand out the same object every time.
    body: Any = copy.deepcopy(draw(valid))
    bad = JUNK
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))):
        body = _mutate(draw, body, fields, bad)
    return body
