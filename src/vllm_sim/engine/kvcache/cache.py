"""The simulated prefix cache: full blocks, shared and reference-counted, evicted LRU.

A block is keyed by (hash, model) so the base model and each LoRA keep separate chains.
Blocks held by running sequences are `used` (with a reference count); released blocks stay
cached in `unused` in release order until evicted, oldest first, blocks of models that are
no longer loaded (LoRAs whose slot was taken) before any other. Hits count the longest
cached prefix, as vLLM's prefix cache does. Every change is reported as a KV event.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vllm_sim.engine.kvcache.events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent

BlockKey = tuple[int, str]


@dataclass(frozen=True, slots=True)
class Lora:
    slot: int  # 1-based adapter slot, as KV events report it
    name: str


class BlockCache:
    def __init__(
        self, capacity: int, block_size: int, publish: Callable[[KvEvent], None] | None = None
    ) -> None:
        self.capacity = capacity
        self.block_size = block_size
        self._publish = publish or (lambda _event: None)
        self.used: dict[BlockKey, int] = {}
        self.unused: OrderedDict[BlockKey, None] = OrderedDict()  # oldest release first
        self._tokens: dict[BlockKey, tuple[int, ...]] = {}
        self._held: dict[int, list[BlockKey]] = {}
        self.loaded_models: set[str] = set()
        self.disabled = False

    @property
    def usage(self) -> float:
        """Fraction of the cache held by running sequences (idle cached blocks are free)."""
        return len(self.used) / self.capacity if self.capacity else 0.0

    def blocks_needed(self, hashes: Sequence[int], model: str) -> int:
        """Blocks a sequence would newly hold: what admission must find room for."""
        if self.disabled:
            return 0
        used = self.used
        return sum(1 for h in hashes if (h, model) not in used)

    def fits(self, hashes: Sequence[int], model: str) -> bool:
        return len(self.used) + self.blocks_needed(hashes, model) <= self.capacity

    def start(
        self, uid: int, hashes: Sequence[int], tokens: Sequence[int], model: str, lora: Lora | None
    ) -> int:
        """Holds the sequence's blocks; returns how many lead the prompt already cached.

        The caller checked `fits` first: admission waits rather than fail.
        """
        if self.disabled or not hashes:
            return 0
        keys = [(h, model) for h in hashes]
        prefix = 0
        while prefix < len(keys) and (keys[prefix] in self.used or keys[prefix] in self.unused):
            prefix += 1
        # Hold every block already present before making room for the new ones, so that
        # eviction can never take a block this very request is about to reuse.
        missing: list[int] = []
        for index, key in enumerate(keys):
            if key in self.used:
                self.used[key] += 1
            elif key in self.unused:
                del self.unused[key]
                self.used[key] = 1
            else:
                missing.append(index)
        new_runs: list[list[int]] = []  # runs of consecutive block indices not cached
        bs = self.block_size
        for index in missing:
            key = keys[index]
            self._make_room()
            self.used[key] = 1
            self._tokens[key] = tuple(tokens[index * bs : (index + 1) * bs])
            if new_runs and new_runs[-1][-1] == index - 1:
                new_runs[-1].append(index)
            else:
                new_runs.append([index])
        for run in new_runs:
            self._stored(keys, run, lora)
        self._held[uid] = keys
        return prefix

    def finish(self, uid: int) -> None:
        """Releases the sequence's blocks; those no one holds stay cached, newest last."""
        keys = self._held.pop(uid, None)
        if keys is None:
            return
        # The tail first: evicted first, it leaves the rest of the prefix useful (as vLLM).
        for key in reversed(keys):
            count = self.used.get(key)
            if count is None:
                continue  # cleared by /sleep while this sequence ran
            if count > 1:
                self.used[key] = count - 1
            else:
                del self.used[key]
                self.unused[key] = None

    def clear(self) -> None:
        """Forgets every block (sleep): one AllBlocksCleared, no per-block removals."""
        self.used.clear()
        self.unused.clear()
        self._tokens.clear()
        self._held.clear()
        self._publish(AllBlocksCleared())

    def _make_room(self) -> None:
        if len(self.used) + len(self.unused) < self.capacity or not self.unused:
            return
        victim = next((k for k in self.unused if k[1] not in self.loaded_models), None)
        if victim is None:
            victim = next(iter(self.unused))
        del self.unused[victim]
        del self._tokens[victim]
        self._publish(BlockRemoved((victim[0],)))

    def _stored(self, keys: list[BlockKey], run: list[int], lora: Lora | None) -> None:
        first = run[0]
        parent = keys[first - 1][0] if first > 0 else None
        tokens: list[int] = []
        for index in run:
            tokens += self._tokens[keys[index]]
        self._publish(
            BlockStored(
                tuple(keys[i][0] for i in run),
                parent,
                tuple(tokens),
                self.block_size,
                lora.slot if lora else None,
                lora.name if lora else None,
            )
        )
