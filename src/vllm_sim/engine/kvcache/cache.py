"""The simulated KV cache: every block a running sequence holds, and the prefix cache.

A sequence holds one block per `block_size` tokens of its prompt and its output, as in
vLLM. The prompt's full blocks are the prefix cache's: keyed by (hash, model) so the base
model and each LoRA keep separate chains, shared and reference-counted while `used`, and
once released kept cached in `unused` in release order until evicted, oldest first, blocks
of models that are no longer loaded (LoRAs whose slot was taken) before any other. The rest
(a prompt's partial last block, the output's blocks, and every block when prefix caching is
off) are the sequence's own: counted, never shared, never reported. Cached blocks nobody
holds count as free, as in vLLM's usage figure.

A hit is the longest run of leading blocks cached, as vLLM's `get_computed_blocks` finds
it, and like it capped below the tokens to compute: at least the last token is computed (it
is what the first output token is sampled from), so the hit is at most (tokens - 1) // block
size blocks; a prompt found whole recomputes its last full block. Every block after the hit
is computed by the sequence and stored (one KV event for them all, as vLLM's
`cache_full_blocks`), including one whose hash is already cached: vLLM keeps a second copy
rather than change a block table, and reports it stored again. Here a copy of a block
nobody holds takes its place (the same count of blocks held); a copy of a block others
hold is a block of the sequence's own, counted while it runs.

With CPU offloading (`offload`, offload.py's tier) the lookup goes on past the GPU's hit
into the CPU tier: the blocks found there are loaded back (`loaded`, for the timing to
wait on) and from then on are the GPU's like computed ones (stored, reported stored); and
the prompt's full blocks are offered to the tier as they are computed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vllm_sim.engine.kvcache.events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent
from vllm_sim.engine.kvcache.offload import CpuTier

BlockKey = tuple[int, str]


@dataclass(frozen=True, slots=True)
class BlockCosts:
    """How many blocks of the shared pool a sequence holds, for a model whose layers form
    several KV cache groups (vLLM's hybrid KV cache manager): each of its token blocks
    takes one block in each of the `full` groups (full attention, which keeps every
    token), one in each capped group while the sequence holds no more than that group's
    cap (a sliding window: vLLM frees the blocks that fall out of it), and the sequence
    one block in each of the `state` groups (a Mamba or linear-attention state). A prefix
    block the cache shares stands for its block of a full group; the rest of a sequence's
    blocks are its own. Without costs a token block is one block."""

    full: int
    capped: tuple[tuple[int, int], ...] = ()  # (groups, the most blocks each holds)
    state: int = 0

    def blocks(self, token_blocks: int) -> int:
        if token_blocks <= 0:
            return 0
        total = self.full * token_blocks + self.state
        for groups, cap in self.capped:
            total += groups * (token_blocks if token_blocks < cap else cap)
        return total

    def longest(self, capacity: int) -> int:
        """The most token blocks one sequence can hold in `capacity` blocks."""
        low, high = 0, capacity
        while low < high:
            middle = (low + high + 1) // 2
            if self.blocks(middle) <= capacity:
                low = middle
            else:
                high = middle - 1
        return low


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
        self._held: dict[int, list[BlockKey]] = {}
        # Sequence uid -> its copies of blocks that others held when it computed them.
        self._copies: dict[int, list[BlockKey]] = {}
        self._own: dict[int, int] = {}  # sequence uid -> blocks of its own (not shared)
        self.own_blocks = 0
        self.loaded_models: set[str] = set()
        self.disabled = False
        self.offload: CpuTier | None = None  # the CPU offloading tier, if any
        self.costs: BlockCosts | None = None  # several KV cache groups, if the model has them
        # Blocks the latest `start` loaded back from the CPU tier, and the seconds it takes.
        self.loaded = 0
        self.load_seconds = 0.0

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
        """Blocks a sequence of `tokens` tokens holds (across its groups, with `costs`)."""
        token_blocks = -(-tokens // self.block_size)
        costs = self.costs
        return token_blocks if costs is None else costs.blocks(token_blocks)

    def max_tokens(self) -> int:
        """The most tokens one sequence can hold in the whole cache."""
        costs = self.costs
        blocks = self.capacity if costs is None else costs.longest(self.capacity)
        return blocks * self.block_size

    def hit_limit(self, tokens: int) -> int:
        """The most blocks a sequence computing `tokens` tokens may find cached: as in vLLM,
        at least its last token is computed, so a hit is whole blocks of the others."""
        return max(tokens - 1, 0) // self.block_size

    def blocks_needed(self, hashes: Sequence[int], model: str, tokens: int) -> int:
        """Blocks a sequence of `tokens` (its prompt's full blocks hashed) would newly take:
        what admission must find room for. Only the blocks of its hit that others hold cost
        nothing; every other block is taken from the free ones (a cached block nobody holds
        counts as free)."""
        if self.disabled:
            return 0
        used, unused = self.used, self.unused
        shared = 0
        for h in hashes[: self.hit_limit(tokens)]:
            key = (h, model)
            if key in used:
                shared += 1
            elif key not in unused:
                break
        return self.blocks_for(tokens) - shared

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
        computed: int,
    ) -> int:
        """Holds the blocks for `computed` tokens of KV of a sequence (its prompt, and for a
        preempted sequence recomputed, the output it had made), the prompt's full ones by
        `hashes`; returns the hit: how many blocks lead the prompt already cached, at most
        `hit_limit(computed)`.

        The caller checked `fits` first: admission waits rather than fail.
        """
        self.loaded, self.load_seconds = 0, 0.0
        if self.disabled:
            return 0
        hit = 0
        if hashes:
            hit = self._hold_prefix(uid, hashes, tokens, model, lora, self.hit_limit(computed))
        self.take(uid, self.blocks_for(computed) - len(hashes))
        return hit + self.loaded

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
        self,
        uid: int,
        hashes: Sequence[int],
        tokens: Sequence[int],
        model: str,
        lora: Lora | None,
        limit: int,
    ) -> int:
        keys = [(h, model) for h in hashes]
        used, unused, per_model = self.used, self.unused, self._unused_per_model
        # The hit is held before room is made for the rest, so that eviction never takes a
        # block this very request reuses.
        hit = 0
        for key in keys[:limit]:
            count = used.get(key)
            if count is not None:
                used[key] = count + 1
            elif key in unused:
                del unused[key]
                per_model[model] -= 1
                used[key] = 1
            else:
                break
            hit += 1
        self._held[uid] = held = keys[:hit]
        tier = self.offload
        if hit == len(keys):
            if tier is not None:
                self._offload(tier, keys, hit, tokens, lora)
            return hit
        # The rest is computed here and stored, cached or not (see the module's comment).
        for key in keys[hit:]:
            count = used.get(key)
            if count is None and key in unused:
                del unused[key]  # the copy takes the idle block's place
                per_model[model] -= 1
            elif count is not None:
                self._make_room()
                self._own[uid] = self._own.get(uid, 0) + 1
                self.own_blocks += 1
                self._copies.setdefault(uid, []).append(key)
                continue
            else:
                self._make_room()
            used[key] = 1
            held.append(key)
        if self._publishing:
            bs = self.block_size
            self._publish(
                BlockStored(
                    tuple(h for h, _ in keys[hit:]),
                    keys[hit - 1][0] if hit else None,
                    tuple(tokens[hit * bs : len(keys) * bs]),
                    bs,
                    lora.slot if lora else None,
                    lora.name if lora else None,
                )
            )
        if tier is not None:  # after the GPU's events: a block reaches the CPU once computed
            self._offload(tier, keys, hit, tokens, lora)
        return hit

    def _offload(
        self,
        tier: CpuTier,
        keys: list[BlockKey],
        hit: int,
        tokens: Sequence[int],
        lora: Lora | None,
    ) -> None:
        """The CPU tier's part of a start: the run after the GPU's hit found there is
        loaded; the blocks after what was loaded (all of them, when nothing was) are
        offered to the tier."""
        loaded = tier.lookup(keys, hit) if hit < len(keys) else 0
        if loaded:
            self.loaded, self.load_seconds = loaded, tier.load(loaded)
        publish = self._publish if self._publishing else None
        tier.store(
            keys,
            hit + loaded if loaded else 0,
            tokens,
            (lora.slot, lora.name) if lora else None,
            publish,
            hit if loaded else 0,
        )

    def finish(self, uid: int) -> None:
        """Releases the sequence's blocks; prefix blocks no one holds stay cached, newest
        last."""
        own = self._own.pop(uid, 0)
        self.own_blocks -= own
        keys = self._held.pop(uid, None)
        if keys is None:
            return
        per_model = self._unused_per_model
        if self._copies:
            self._release_copies(uid)
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
                per_model[key[1]] = per_model.get(key[1], 0) + 1

    def _release_copies(self, uid: int) -> None:
        """The sequence's copies of blocks others held (they come after its hit, so are
        released first): the cached block, if no one holds it now, is as recent as the copy;
        one that others still hold is released when they end, and one evicted meanwhile was
        reported removed, so the copy is not kept either."""
        unused = self.unused
        for key in reversed(self._copies.pop(uid, ())):
            if key in unused:
                unused.move_to_end(key)

    def clear(self) -> None:
        """Forgets every block, held ones too (sleep, or a reset once the running sequences
        are preempted): one AllBlocksCleared, no per-block removals."""
        self.used.clear()
        self.unused.clear()
        self._unused_per_model.clear()
        self._held.clear()
        self._copies.clear()
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
        self._publish(BlockRemoved((victim[0],)))


def _drop(event: KvEvent) -> None:
    """Where events go when nobody listens (none are built then)."""
