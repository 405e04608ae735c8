"""Synthetic logprob values: a fixed function of the token position, so they are reproducible."""

from __future__ import annotations

# Values are computed in integer tenths and divided once, so they are the doubles
# nearest to -1.1, -1.6, ... and serialize without float noise (-1.1, not -1.1000000000000001).
_BASE_TENTHS = 10
_ALTERNATIVE_STEP_TENTHS = 5


PERIOD = 3
"""Logprob values repeat every PERIOD positions: a token's entry depends only on its text
and `position % PERIOD`, so encoders may reuse it."""


def _tenths(position: int) -> int:
    return _BASE_TENTHS + position % PERIOD


def token_logprob(position: int) -> float:
    """L(p) = -1.0 - (p mod 3) * 0.1."""
    return -_tenths(position) / 10


def top_alternatives(piece: str, position: int, k: int) -> list[tuple[str, float]]:
    """`k` entries: (piece, L(p)), then (piece_j, L(p) - 0.5*j) for j = 1..k-1."""
    base = _tenths(position)
    return [
        (piece if j == 0 else f"{piece}_{j}", -(base + _ALTERNATIVE_STEP_TENTHS * j) / 10)
        for j in range(max(0, k))
    ]
