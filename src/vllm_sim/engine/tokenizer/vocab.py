"""Bounded piece <-> id memory for the simulated tokenizer.

Ids are hashes, so decoding needs to remember which piece produced an id. Clients choose
the pieces (a word run with thousands of trailing spaces is one piece), so the memory is
bounded in estimated bytes, not in entries. It has two generations: new entries go into
the current generation; when it would exceed half the budget it becomes the old
generation and the previous old one is dropped. Entries found in the old generation are
promoted back, so pieces in recent use stay decodable, and the estimated size never
exceeds the budget (an approximate LRU at O(1) cost).
"""

from __future__ import annotations

import sys
from typing import Final

from vllm_sim.engine.tokenizer.fnv import fnv1a_32

DEFAULT_MAX_BYTES: Final = 32 * 1024 * 1024

# Memory of one entry besides its piece: the id (an int of up to 32 bytes) and a slot in
# each of the two dicts. tracemalloc measures 136 bytes per entry at the worst point (just
# after both dicts have doubled) on CPython 3.11+; the rest is margin.
ENTRY_OVERHEAD: Final = 144


def entry_bytes(piece: str) -> int:
    """The estimated memory one remembered piece costs."""
    return sys.getsizeof(piece) + ENTRY_OVERHEAD


class PieceVocabulary:
    """Remembers piece -> id (a hash cache) and id -> piece (for decoding).

    On an id collision the most recently learned piece wins for decoding. Pieces whose
    entry would not fit in half of `max_bytes` get ids but are not remembered.
    Not locked: under the GIL a race can at worst forget an entry, never corrupt one.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._generation_bytes = max(1, max_bytes // 2)
        # Read directly by the tokenizer's hot path: piece -> id, current generation.
        self.ids: dict[str, int] = {}
        self._pieces: dict[int, str] = {}
        self._old_ids: dict[str, int] = {}
        self._old_pieces: dict[int, str] = {}
        self._bytes = 0  # estimated, current generation
        self._old_bytes = 0

    def __len__(self) -> int:
        """Number of remembered pieces (both generations)."""
        return len(self.ids) + len(self._old_ids)

    @property
    def estimated_bytes(self) -> int:
        """Estimated memory of both generations; never above `max_bytes`."""
        return self._bytes + self._old_bytes

    def id_of(self, piece: str) -> int:
        """Id of `piece`, hashing and remembering it when it is not current."""
        token_id = self.ids.get(piece)
        if token_id is None:
            token_id = self._old_ids.get(piece)
            if token_id is None:
                token_id = fnv1a_32(piece)
            self._remember(piece, token_id)
        return token_id

    def piece_of(self, token_id: int) -> str | None:
        """The piece that produced `token_id`, or None if it is not remembered."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._old_pieces.get(token_id)
            if piece is not None:
                self._remember(piece, token_id)
        return piece

    def _remember(self, piece: str, token_id: int) -> None:
        size = entry_bytes(piece)
        if size > self._generation_bytes:
            return
        if self._bytes + size > self._generation_bytes:
            self._rotate()
        self.ids[piece] = token_id
        self._pieces[token_id] = piece
        self._bytes += size

    def _rotate(self) -> None:
        self._old_ids, self._old_pieces = self.ids, self._pieces
        self._old_bytes = self._bytes
        self.ids, self._pieces = {}, {}
        self._bytes = 0
