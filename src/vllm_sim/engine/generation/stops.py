"""Where a sequence stops early: a stop string in its text or a stop token among its ids.

vLLM checks after each generated token, once `min_tokens` are out, whether the token is one
of `stop_token_ids` or whether a stop string ends in the text the token added; the first
hit ends the sequence with `finish_reason` "stop" and `stop_reason` naming what matched.
A stop string is cut from the text (unless `include_stop_str_in_output`), but the token
that completed it still counts. The whole output is known when a sequence starts here, so
the first hit is found in one pass instead of token by token.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True, slots=True)
class StopRules:
    """A request's stop conditions (vLLM's sampling parameters of the same names)."""

    strings: tuple[str, ...] = ()
    token_ids: frozenset[int] = frozenset()
    include_stop_str_in_output: bool = False
    min_tokens: int = 0

    @property
    def active(self) -> bool:
        return bool(self.strings or self.token_ids)


@dataclass(frozen=True, slots=True)
class StopHit:
    """The token that ends the sequence (kept, counted) and the text that survives."""

    token: int  # index of the last output token
    reason: str | int  # the stop string or the stop token id
    text_end: int | None = None  # characters of output text kept; None: all of it


def find_stop(ids: list[int], pieces: list[str], rules: StopRules) -> StopHit | None:
    """The earliest stop in an output; on the same token, a stop token id wins, then the
    stop strings in the order the request listed them."""
    first = max(rules.min_tokens - 1, 0)  # the first token whose stop counts
    best: StopHit | None = None
    if rules.token_ids:
        for index in range(first, len(ids)):
            if ids[index] in rules.token_ids:
                best = StopHit(index, ids[index])
                break
    if rules.strings:
        hit = _first_string(pieces, rules, first)
        if hit is not None and (best is None or hit.token < best.token):
            best = hit
    return best


def _first_string(pieces: list[str], rules: StopRules, first: int) -> StopHit | None:
    ends = list(accumulate(map(len, pieces)))
    if first >= len(ends):
        return None
    text = "".join(pieces)
    checked_from = ends[first] - len(pieces[first])  # text the earlier tokens added
    best: StopHit | None = None
    for stop in rules.strings:
        # Only an occurrence that ends in a checked token is seen, as vLLM looks for a
        # stop string only where it could end in the newly added text.
        at = text.find(stop, max(checked_from - len(stop) + 1, 0))
        if at < 0:
            continue
        token = _token_at(ends, at + len(stop) - 1, first)
        if best is None or token < best.token:
            keep = at + len(stop) if rules.include_stop_str_in_output else at
            best = StopHit(token, stop, keep)
    return best


def _token_at(ends: list[int], char: int, low: int) -> int:
    """The index of the token holding character `char` (ends[i]: end offset of token i)."""
    high = len(ends) - 1
    while low < high:
        mid = (low + high) // 2
        if ends[mid] > char:
            high = mid
        else:
            low = mid + 1
    return low


def cut_text(pieces: list[str], keep: int) -> list[str]:
    """`pieces` with their text cut after `keep` characters (emptied pieces stay: their
    tokens were generated and count)."""
    cut: list[str] = []
    offset = 0
    for piece in pieces:
        room = keep - offset
        cut.append(piece if room >= len(piece) else piece[: max(room, 0)])
        offset += len(piece)
    return cut
