"""The token ids of recently encoded texts, bounded in estimated bytes.

Prompts repeat (system prompts, benchmarks, retries), so remembering their ids saves the
tokenization. Clients choose the texts, so the memory is bounded in bytes: each entry is
charged the text, the ids tuple, every id as an int object of its own (the vocabulary may
have forgotten the piece, and then the memo alone keeps the int alive) and its slots in
the dict and the eviction queue. The oldest entries are evicted first (FIFO is enough
here); an entry larger than the whole budget is not remembered.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Final, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024

_INT_BYTES: Final = sys.getsizeof(2**32 - 1)  # the largest token id
# A dict slot and a deque slot, measured with tracemalloc at the worst point (just after
# the dict has doubled) on CPython 3.11+: 53 bytes; the rest is margin.
ENTRY_OVERHEAD: Final = 64


def entry_bytes(text: str, ids: tuple[int, ...]) -> int:
    """The estimated memory one remembered text costs."""
    return sys.getsizeof(text) + sys.getsizeof(ids) + len(ids) * _INT_BYTES + ENTRY_OVERHEAD


class PromptMemo:
    """text -> token ids, the oldest evicted first once `max_bytes` would be exceeded.

    Reads take no lock (a dict lookup is atomic under the GIL); `add` takes one, since a
    large request's prompts are tokenized on a worker thread while the event loop
    tokenizes others, and the byte count must not drift.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        # Read directly by the tokenizer's hot path; a tuple, so no caller can change it.
        self.ids: dict[str, tuple[int, ...]] = {}
        self._order: deque[str] = deque()  # insertion order of `ids`, for eviction
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def estimated_bytes(self) -> int:
        """Estimated memory of the remembered entries; never above `max_bytes`."""
        return self._bytes

    def add(self, text: str, ids: tuple[int, ...]) -> None:
        """Remembers `ids` for `text`, evicting the oldest entries to make room."""
        size = entry_bytes(text, ids)
        if size > self._max_bytes:
            return
        with self._lock:
            if text in self.ids:
                return
            while self._order and self._bytes + size > self._max_bytes:
                oldest = self._order.popleft()
                self._bytes -= entry_bytes(oldest, self.ids.pop(oldest))
            self.ids[text] = ids
            self._order.append(text)
            self._bytes += size


class BoundedMemo(Generic[K, V]):
    """key -> value within `max_bytes` as `size(key, value)` estimates them, the oldest
    evicted first; like PromptMemo, lock-free reads and locked writes."""

    def __init__(self, max_bytes: int, size: Callable[[K, V], int]) -> None:
        self._max_bytes = max_bytes
        self._size = size
        self._entries: dict[K, tuple[V, int]] = {}
        self._order: deque[K] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: K, value: V) -> None:
        size = self._size(key, value)
        if size > self._max_bytes:
            return
        with self._lock:
            if key in self._entries:
                return
            while self._order and self._bytes + size > self._max_bytes:
                self._bytes -= self._entries.pop(self._order.popleft())[1]
            self._entries[key] = (value, size)
            self._order.append(key)
            self._bytes += size
