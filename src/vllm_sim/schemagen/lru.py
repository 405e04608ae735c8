"""A least-recently-used cache bounded by the estimated memory of its entries."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


class SizedLru(Generic[_K, _V]):
    """Keeps entries while their estimated sizes add up to at most `max_bytes`, evicting the
    least recently used first; an entry larger than the whole budget is not kept.
    Not locked: under the GIL a race can at worst evict an entry early, never corrupt one."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[_K, tuple[_V, int]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def estimated_bytes(self) -> int:
        """The sum of the sizes of the entries kept; never above `max_bytes`."""
        return self._bytes

    def get(self, key: _K) -> _V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: _K, value: _V, size: int) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self.max_bytes:
            return
        while self._entries and self._bytes + size > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted
        self._entries[key] = (value, size)
        self._bytes += size

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
