"""LoRA adapters: which are registered, which hold one of the `max-loras` GPU slots, and
which of the `max-cpu-loras` stay loaded in host memory.

A sequence for an adapter runs only while its adapter holds a slot; a slot whose adapter
has nothing running may be handed to another adapter. Adapters dropped from host memory
(least recently used first) count as unloaded, so the KV cache evicts their blocks first.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable

from mypy_extensions import mypyc_attr


class LoraRegistry:
    """Adapter name -> path, as loaded at start-up or through the API."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.paths

    def load(self, name: str, path: str) -> None:
        self.paths[name] = path

    def unload(self, name: str) -> None:
        del self.paths[name]


# Compiled by mypyc (setup.py): a test subclasses it to break its bookkeeping.
@mypyc_attr(allow_interpreted_subclasses=True)
class LoraSlots:
    def __init__(
        self,
        max_loras: int,
        max_cpu_loras: int,
        on_loaded: Callable[[str], None] = lambda _name: None,
        on_unloaded: Callable[[str], None] = lambda _name: None,
    ) -> None:
        self.max_loras = max_loras
        self.max_cpu_loras = max(max_cpu_loras, max_loras)
        self.slots: dict[str, int] = {}  # adapter -> 1-based slot index
        self.running: Counter[str] = Counter()
        self._host: OrderedDict[str, None] = OrderedDict()  # loaded adapters, LRU first
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded

    def can_run(self, name: str) -> bool:
        if name in self.slots or len(self.slots) < self.max_loras:
            return True
        return any(self.running[held] == 0 for held in self.slots)

    def acquire(self, name: str) -> int:
        """Counts a running sequence of `name`, giving it a slot (the caller checked
        `can_run`); returns the slot index."""
        slot = self.slots.get(name)
        if slot is None:
            slot = self._free_slot()
            self.slots[name] = slot
            self._keep_loaded(name)
        self.running[name] += 1
        return slot

    def release(self, name: str) -> None:
        self.running[name] -= 1
        if self.running[name] <= 0:
            del self.running[name]

    def _free_slot(self) -> int:
        taken = set(self.slots.values())
        if len(taken) < self.max_loras:
            return min(set(range(1, self.max_loras + 1)) - taken)
        idle = next(held for held in self.slots if self.running[held] == 0)
        return self.slots.pop(idle)

    def _keep_loaded(self, name: str) -> None:
        if name in self._host:
            self._host.move_to_end(name)
            return
        self._host[name] = None
        self._on_loaded(name)
        while len(self._host) > self.max_cpu_loras:
            victim = next((a for a in self._host if a not in self.slots), None)
            if victim is None:
                break
            del self._host[victim]
            self._on_unloaded(victim)
