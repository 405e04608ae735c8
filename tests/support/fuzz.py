"""Hypothesis settings and JSON strategies shared by the fuzz suites."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz_settings(max_examples: int, *suppress: HealthCheck) -> settings:
    """No deadline, no example database (keeps the repository free of .hypothesis/)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, *suppress],
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
