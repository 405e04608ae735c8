"""Bounded piece <-> id memory for the simulated tokenizer.

Ids are hashes, so decoding needs to remember which piece produced an id. Memory is
bounded with two generations: new entries go into the current generation; when it is
full it becomes the old generation and the previous old one is dropped. Entries found
in the old generation are promoted back, so pieces in recent use stay decodable, and
the total size never exceeds the configured caps (an approximate LRU at O(1) cost).
"""

from __future__ import annotations

from typing import Final

from vllm_sim.engine.tokenizer.fnv import fnv1a_32

DEFAULT_MAX_ENTRIES: Final = 1_000_000
DEFAULT_MAX_CHARS: Final = 64 * 1024 * 1024


class PieceVocabulary:
    """Remembers piece -> id (a hash cache) and id -> piece (for decoding).

    On an id collision the most recently learned piece wins for decoding. Pieces
    longer than half of `max_chars` get ids but are not remembered.
    Not locked: under the GIL a race can at worst forget an entry, never corrupt one.
    """

    def __init__(
        self, max_entries: int = DEFAULT_MAX_ENTRIES, max_chars: int = DEFAULT_MAX_CHARS
    ) -> None:
        self._generation_entries = max(1, max_entries // 2)
        self._generation_chars = max(1, max_chars // 2)
        # Read directly by the tokenizer's hot path: piece -> id, current generation.
        self.ids: dict[str, int] = {}
        self._pieces: dict[int, str] = {}
        self._old_ids: dict[str, int] = {}
        self._old_pieces: dict[int, str] = {}
        self._chars = 0

    def __len__(self) -> int:
        """Number of remembered pieces (both generations)."""
        return len(self.ids) + len(self._old_ids)

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
        if len(piece) > self._generation_chars:
            return
        full = len(self.ids) >= self._generation_entries
        if full or self._chars + len(piece) > self._generation_chars:
            self._rotate()
        self.ids[piece] = token_id
        self._pieces[token_id] = piece
        self._chars += len(piece)

    def _rotate(self) -> None:
        self._old_ids, self._old_pieces = self.ids, self._pieces
        self.ids, self._pieces = {}, {}
        self._chars = 0
