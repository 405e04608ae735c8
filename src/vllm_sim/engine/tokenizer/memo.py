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


class BoundedMemo(Generic[K, V]):
    """key -> value within `max_bytes` as `size(key, value)` estimates them, the oldest
    evicted first (FIFO is enough here); a value larger than the whole budget is not kept.

    Reads take no lock (a dict lookup is atomic under the GIL); `put` takes one, since a
    large request is handled on a worker thread while the event loop handles others, and
    the byte count must not drift.
    """

    def __init__(self, max_bytes: int, size: Callable[[K, V], int]) -> None:
        self._max_bytes = max_bytes
        self._size = size
        # Read directly by hot paths.
        self.values: dict[K, V] = {}
        self._order: deque[K] = deque()  # insertion order of `values`, for eviction
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.values)

    @property
    def estimated_bytes(self) -> int:
        """Estimated memory of the remembered entries; never above `max_bytes`."""
        return self._bytes

    def get(self, key: K) -> V | None:
        return self.values.get(key)

    def put(self, key: K, value: V) -> None:
        """Remembers `value` for `key`, evicting the oldest entries to make room."""
        size = self._size(key, value)
        if size > self._max_bytes:
            return
        with self._lock:
            if key in self.values:
                return
            while self._order and self._bytes + size > self._max_bytes:
                oldest = self._order.popleft()
                self._bytes -= self._size(oldest, self.values.pop(oldest))
            self.values[key] = value
            self._order.append(key)
            self._bytes += size


class PromptMemo(BoundedMemo[str, tuple[int, ...]]):
    """text -> token ids (a tuple, so no caller can change it), each entry charged as
    `entry_bytes` says."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(max_bytes, entry_bytes)
        self.ids = self.values  # the tokenizers' hot path reads the dict directly

    def add(self, text: str, ids: tuple[int, ...]) -> None:
        self.put(text, ids)
