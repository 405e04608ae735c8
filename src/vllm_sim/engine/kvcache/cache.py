"""The simulated KV cache: every block a running sequence holds, and the prefix cache.

A sequence holds one block per `block_size` tokens of its prompt and its output, as in
vLLM. The prompt's full blocks are the prefix cache's: keyed by (hash, model) so the base
model and each LoRA keep separate chains, shared and reference-counted while `used`, and
once released kept cached in `unused` in release order until evicted, oldest first, blocks
of models that are no longer loaded (LoRAs whose slot was taken) before any other. Hits
count the longest cached prefix, as vLLM's prefix cache does, and each stored or evicted
prefix block is reported as a KV event. The rest (a prompt's partial last block, the
output's blocks, and every block when prefix caching is off) are the sequence's own:
counted, never shared, never reported. Cached blocks nobody holds count as free, as in
vLLM's usage figure.
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
        # Events go to the configured sink (the ZMQ publisher) and to whoever subscribed
        # meanwhile (gRPC streams); with neither, none are built.
        self._sink = publish
        self._subscribers: list[Callable[[KvEvent], None]] = []
        self._publish: Callable[[KvEvent], None] = _drop
        self._publishing = False
        self._route()
        self.used: dict[BlockKey, int] = {}
        self.unused: OrderedDict[BlockKey, None] = OrderedDict()  # oldest release first
        # Unused blocks per model: eviction looks past the oldest block for one of an
        # unloaded adapter only when there is one, not through the whole cache every time.
        self._unused_per_model: dict[str, int] = {}
        self._tokens: dict[BlockKey, tuple[int, ...]] = {}
        self._held: dict[int, list[BlockKey]] = {}
        self._own: dict[int, int] = {}  # sequence uid -> blocks of its own (not shared)
        self.own_blocks = 0
        self.loaded_models: set[str] = set()
        self.disabled = False

    def subscribe(self, listener: Callable[[KvEvent], None]) -> Callable[[], None]:
        """Calls `listener` with every event from now on; returns what stops it."""
        self._subscribers.append(listener)
        self._route()

        def stop() -> None:
            if listener in self._subscribers:
                self._subscribers.remove(listener)
                self._route()

        return stop

    def _route(self) -> None:
        if self._subscribers:
            self._publish, self._publishing = self._fan_out, True
        elif self._sink is not None:
            self._publish, self._publishing = self._sink, True
        else:
            self._publish, self._publishing = _drop, False

    def _fan_out(self, event: KvEvent) -> None:
        if self._sink is not None:
            self._sink(event)
        for listener in tuple(self._subscribers):
            listener(event)

    @property
    def held_blocks(self) -> int:
        """Blocks held by running sequences."""
        return len(self.used) + self.own_blocks

    @property
    def free_blocks(self) -> int:
        """Blocks a sequence may still take (cached blocks nobody holds are evicted)."""
        return self.capacity - len(self.used) - self.own_blocks

    @property
    def usage(self) -> float:
        """Fraction of the cache held by running sequences (idle cached blocks are free)."""
        return self.held_blocks / self.capacity if self.capacity else 0.0

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def blocks_needed(self, hashes: Sequence[int], model: str, tokens: int) -> int:
        """Blocks a sequence of `tokens` (its prompt's full blocks hashed) would newly take:
        what admission must find room for."""
        if self.disabled:
            return 0
        used = self.used
        shared = sum(1 for h in hashes if (h, model) not in used)
        return shared + max(self.blocks_for(tokens) - len(hashes), 0)

    def fits(self, hashes: Sequence[int], model: str, tokens: int) -> bool:
        free = self.free_blocks
        if self.blocks_for(tokens) <= free:
            return True  # fits even if nothing is shared: the common case, counted cheaply
        return self.blocks_needed(hashes, model, tokens) <= free

    def start(
        self,
        uid: int,
        hashes: Sequence[int],
        tokens: Sequence[int],
        model: str,
        lora: Lora | None,
        blocks: int,
    ) -> int:
        """Holds `blocks` blocks for a sequence (its prompt's, and for a preempted sequence
        recomputed, its output's), the prompt's full ones by `hashes`; returns how many lead
        the prompt already cached.

        The caller checked `fits` first: admission waits rather than fail.
        """
        if self.disabled:
            return 0
        prefix = self._hold_prefix(uid, hashes, tokens, model, lora) if hashes else 0
        self.take(uid, blocks - len(hashes))
        return prefix

    def grow(self, uid: int, count: int) -> bool:
        """Gives the sequence `count` more blocks; False, taking nothing, if too few are
        free."""
        if self.disabled:
            return True
        if count > self.free_blocks:
            return False
        self.take(uid, count)
        return True

    def take(self, uid: int, count: int) -> None:
        """Gives the sequence `count` blocks of its own, evicting cached ones if needed."""
        if count <= 0:
            return
        own = self._own
        own[uid] = own.get(uid, 0) + count
        if len(self.used) + len(self.unused) + self.own_blocks + count <= self.capacity:
            self.own_blocks += count  # room without evicting anything
            return
        for _ in range(count):
            self._make_room()
            self.own_blocks += 1

    def _hold_prefix(
        self, uid: int, hashes: Sequence[int], tokens: Sequence[int], model: str, lora: Lora | None
    ) -> int:
        keys = [(h, model) for h in hashes]
        used, unused = self.used, self.unused
        # Hold every block already present before making room for the new ones, so that
        # eviction can never take a block this very request is about to reuse. The cached
        # prefix ends at the first block not present.
        missing: list[int] = []
        for index, key in enumerate(keys):
            count = used.get(key)
            if count is not None:
                used[key] = count + 1
            elif key in unused:
                del unused[key]
                self._unused_per_model[model] -= 1
                used[key] = 1
            else:
                missing.append(index)
        self._held[uid] = keys
        if not missing:
            return len(keys)
        prefix = missing[0]
        new_runs: list[list[int]] = []  # runs of consecutive block indices not cached
        bs = self.block_size
        for index in missing:
            key = keys[index]
            self._make_room()
            self.used[key] = 1
            if not self._publishing:
                continue  # the tokens and runs only feed KV events
            self._tokens[key] = tuple(tokens[index * bs : (index + 1) * bs])
            if new_runs and new_runs[-1][-1] == index - 1:
                new_runs[-1].append(index)
            else:
                new_runs.append([index])
        for run in new_runs:
            self._stored(keys, run, lora)
        return prefix

    def finish(self, uid: int) -> None:
        """Releases the sequence's blocks; prefix blocks no one holds stay cached, newest
        last."""
        own = self._own.pop(uid, 0)
        self.own_blocks -= own
        keys = self._held.pop(uid, None)
        if keys is None:
            return
        # The tail first: evicted first, it leaves the rest of the prefix useful (as vLLM).
        per_model = self._unused_per_model
        for key in reversed(keys):
            count = self.used.get(key)
            if count is None:
                continue  # cleared by /sleep while this sequence ran
            if count > 1:
                self.used[key] = count - 1
            else:
                del self.used[key]
                self.unused[key] = None
                per_model[key[1]] = per_model.get(key[1], 0) + 1

    def clear(self) -> None:
        """Forgets every block, held ones too (sleep, or a reset once the running sequences
        are preempted): one AllBlocksCleared, no per-block removals."""
        self.used.clear()
        self.unused.clear()
        self._unused_per_model.clear()
        self._tokens.clear()
        self._held.clear()
        self._own.clear()
        self.own_blocks = 0
        self._publish(AllBlocksCleared())

    def _make_room(self) -> None:
        """Evicts a cached block nobody holds if the cache is full with them."""
        if len(self.used) + len(self.unused) + self.own_blocks < self.capacity or not self.unused:
            return
        loaded = self.loaded_models
        per_model = self._unused_per_model
        victim = None
        if any(count and model not in loaded for model, count in per_model.items()):
            victim = next((k for k in self.unused if k[1] not in loaded), None)
        if victim is None:
            victim = next(iter(self.unused))
        del self.unused[victim]
        per_model[victim[1]] -= 1
        self._tokens.pop(victim, None)
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


def _drop(event: KvEvent) -> None:
    """Where events go when nobody listens (none are built then)."""
