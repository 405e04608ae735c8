"""The CPU offloading tier: vLLM 0.32's native KV offloading (its OffloadingConnector with
the CPU spec, what `--kv-offloading-size N --kv-offloading-backend native` sets up).

What vLLM does, and so what this does (vllm/v1/kv_offload/cpu/, the connector's
offloading/scheduler.py):

- The tier holds `cpu_bytes // block_bytes` blocks (one offload chunk is one GPU block by
  default), `block_bytes` being the KV of one block over every rank, rounded up to the
  page size.
- Blocks are copied to the CPU as they are computed (store on compute, not on eviction):
  every full prompt block a sequence computes, and a prompt block found in the GPU cache
  but missing from the CPU (only prompt blocks: `offload_prompt_only` is vLLM's default).
  A sequence that loaded blocks from the CPU stores only what follows them (the chunk-level
  policy). Room is made by evicting the least recently used blocks, never one the same
  sequence offers; with too few to evict the store is dropped (an allocation failure).
- A prompt's lookup goes on where the GPU prefix cache's hit ends: the run of following
  full blocks found in the CPU is loaded back over the host link instead of computed (up
  to every full block of the prompt, as the connector looks up to the request's tokens).
- Recency is per request: the blocks a sequence stored or reused are touched, the prefix's
  first block last, so a prompt's tail is evicted before its head.
- Events: a store's evictions are one BlockRemoved, its blocks one BlockStored each, with
  `medium` "CPU" and `group_idx` 0. By default a stored block's payload is vLLM's
  placeholder (the hash alone, no parent, no tokens, block size 0); with
  `self_describing_kv_events` in the connector's extra config, the block's parent, tokens,
  size, LoRA and `kv_cache_spec_kind` (the offloading events tracker's payload).

Transfers take the bytes over the host link: `HOST_LINK_BYTES_PER_SECOND`. Loads delay the
sequence's prefill (the step loop waits for them as for a P/D transfer); stores run
beside the GPU's work, as vLLM's asynchronous copies do, and cost no step time.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vllm_sim.engine.kvcache.events import MEDIUM_CPU, BlockRemoved, BlockStored, KvEvent

BlockKey = tuple[int, str]

HOST_LINK_BYTES_PER_SECOND = 50e9
"""The host link a block crosses between GPU and CPU memory, bytes a second: PCIe Gen5 x16
(an H100 SXM's host link) is 64 GB/s a direction raw, about 50 GB/s in pinned-memory DMA
copies such as vLLM's offloading worker makes (NVIDIA's bandwidthTest on H100 hosts
reports 50-55 GB/s host to device). The same for every --gpu: a figure of the host, not of
the GPU's spec."""

PAGE_BYTES = 4096
"""vLLM rounds one offload chunk's bytes up to the memory page (mmap.PAGESIZE)."""

FULL_ATTENTION = "full_attention"
"""The kv_cache_spec_kind a self-describing event names for a full-attention group."""


@dataclass(frozen=True, slots=True)
class OffloadSpec:
    """The CPU tier of one engine: its memory, the bytes of one block, the host link."""

    cpu_bytes: int
    block_bytes: int  # KV bytes of one block on every rank together
    link_bytes_per_second: float = HOST_LINK_BYTES_PER_SECOND
    self_describing_events: bool = False

    @property
    def chunk_bytes(self) -> int:
        """A block's bytes in the tier, rounded up to the page as vLLM allocates them."""
        return -(-self.block_bytes // PAGE_BYTES) * PAGE_BYTES

    @property
    def capacity(self) -> int:
        """Blocks the tier holds."""
        return self.cpu_bytes // self.chunk_bytes if self.block_bytes > 0 else 0

    def seconds(self, blocks: int) -> float:
        """Seconds `blocks` blocks take over the host link."""
        return blocks * self.block_bytes / self.link_bytes_per_second


class OffloadListener:
    """What the tier's transfers are told to (the offloading metrics); records nothing."""

    def loaded(self, nbytes: int, seconds: float) -> None:
        """A load of `nbytes` from the CPU to the GPU was issued, taking `seconds`."""

    def stored(self, nbytes: int, seconds: float, blocks: int) -> None:
        """A store of `blocks` blocks (`nbytes`) from the GPU to the CPU, taking `seconds`."""

    def store_failed(self) -> None:
        """A store found too few blocks to evict: nothing was stored."""

    def looked_up(self, seconds: float) -> None:
        """One lookup in the tier took `seconds` of this process's time."""


@dataclass(frozen=True, slots=True)
class _Payload:
    """What a self-describing BlockStored tells of a block."""

    parent: int | None
    tokens: tuple[int, ...]
    lora_id: int | None
    lora_name: str | None


class CpuTier:
    """The offloaded blocks, least recently used first; see the module's doc."""

    def __init__(self, spec: OffloadSpec, block_size: int) -> None:
        self.spec = spec
        self.capacity = spec.capacity
        self.block_size = block_size
        self.blocks: OrderedDict[BlockKey, _Payload | None] = OrderedDict()
        self.listener = OffloadListener()

    def __len__(self) -> int:
        return len(self.blocks)

    def lookup(self, keys: Sequence[BlockKey], start: int) -> int:
        """How many of `keys` from `start` on are in the tier, in a run."""
        began = time.perf_counter()
        blocks = self.blocks
        found = 0
        for key in keys[start:]:
            if key not in blocks:
                break
            found += 1
        self.listener.looked_up(time.perf_counter() - began)
        return found

    def load(self, blocks: int) -> float:
        """Loads `blocks` blocks back to the GPU; the seconds it takes."""
        if blocks <= 0:
            return 0.0
        spec = self.spec
        seconds = spec.seconds(blocks)
        self.listener.loaded(blocks * spec.block_bytes, seconds)
        return seconds

    def store(
        self,
        keys: Sequence[BlockKey],
        start: int,
        tokens: Sequence[int],
        lora: tuple[int, str] | None,
        publish: Callable[[KvEvent], None] | None,
        used_from: int | None = None,
    ) -> None:
        """Offers `keys[start:]` (a prompt's full blocks from `start`) to the tier: the
        missing ones are stored, evicting the least recently used others. Then the blocks
        the sequence used (those it loaded, from `used_from`, and those it offered) are
        touched, the first last (most recent)."""
        blocks = self.blocks
        missing = [i for i in range(start, len(keys)) if keys[i] not in blocks]
        if missing:
            self._store(keys, missing, tokens, lora, publish)
        for key in reversed(keys[start if used_from is None else used_from :]):
            if key in blocks:
                blocks.move_to_end(key)

    def _store(
        self,
        keys: Sequence[BlockKey],
        missing: list[int],
        tokens: Sequence[int],
        lora: tuple[int, str] | None,
        publish: Callable[[KvEvent], None] | None,
    ) -> None:
        blocks, spec = self.blocks, self.spec
        evict = len(blocks) + len(missing) - self.capacity
        if evict > 0:
            protected = set(keys)
            victims: list[BlockKey] = []
            for key in blocks:  # least recently used first
                if key not in protected:
                    victims.append(key)
                    if len(victims) == evict:
                        break
            if len(victims) < evict:
                self.listener.store_failed()
                return
            for key in victims:
                del blocks[key]
            if publish is not None:
                hashes = tuple(key[0] for key in victims)
                publish(BlockRemoved(hashes, MEDIUM_CPU, 0))
        payloads = spec.self_describing_events
        bs = self.block_size
        for i in missing:
            payload = None
            if payloads:
                payload = _Payload(
                    keys[i - 1][0] if i else None,
                    tuple(tokens[i * bs : (i + 1) * bs]),
                    lora[0] if lora else None,
                    lora[1] if lora else None,
                )
            blocks[keys[i]] = payload
        count = len(missing)
        self.listener.stored(count * spec.block_bytes, spec.seconds(count), count)
        if publish is not None:
            for i in missing:
                publish(self._stored_event(keys[i][0], blocks[keys[i]]))

    def _stored_event(self, block_hash: int, payload: _Payload | None) -> BlockStored:
        if payload is None:  # vLLM's placeholder: the hash alone
            return BlockStored((block_hash,), None, (), 0, None, None, MEDIUM_CPU, 0)
        return BlockStored(
            (block_hash,),
            payload.parent,
            payload.tokens,
            self.block_size,
            payload.lora_id,
            payload.lora_name,
            MEDIUM_CPU,
            0,
            FULL_ATTENTION,
        )
