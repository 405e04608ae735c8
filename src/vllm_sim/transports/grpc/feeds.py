"""What the gRPC engine service streams besides tokens: the KV cache's events as the
contract's messages, and the model's tokenizer files as one zip archive."""

from __future__ import annotations

import asyncio
import io
import zipfile
from collections import deque
from pathlib import Path

from vllm_sim.engine.kvcache.events import (
    MEDIUM,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
)
from vllm_sim.proto import engine_pb2 as pb

# Events a subscriber may have waiting; one that falls further behind is dropped (a
# slow reader must not make the server buffer without limit).
MAX_PENDING_EVENTS = 10_000
# Events sent in one batch at most: one message stays small whatever piled up.
MAX_BATCH_EVENTS = 1_000

# The files a tokenizer is rebuilt from (the gateway tokenizes with them).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "config.json",
)

_INT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1


def signed64(value: int) -> int:
    """A 64-bit block hash as the contract's int64 carries it (two's complement)."""
    value %= _INT64
    return value - _INT64 if value > _INT64_MAX else value


class KvEventFeed:
    """One subscriber's events, queued as the cache publishes them and handed out in
    batches; the contract's event ids count from 1 over the subscription."""

    def __init__(self, block_size: int) -> None:
        self._block_size = block_size
        self._pending: deque[KvEvent] = deque()
        self._ready = asyncio.Event()
        self._overflowed = False
        self._event_id = 0
        self.sequence = 0  # batches sent

    def add(self, event: KvEvent) -> None:
        if len(self._pending) >= MAX_PENDING_EVENTS:
            self._overflowed = True
        else:
            self._pending.append(event)
        self._ready.set()

    async def next(self) -> list[pb.KvCacheEvent] | None:
        """The next batch, once there is one; None once the subscriber fell too far
        behind."""
        while not self._pending and not self._overflowed:
            self._ready.clear()
            await self._ready.wait()
        if self._overflowed:
            return None
        batch: list[pb.KvCacheEvent] = []
        pending = self._pending
        while pending and len(batch) < MAX_BATCH_EVENTS:
            self._event_id += 1
            batch.append(self._message(pending.popleft()))
        return batch

    def _message(self, event: KvEvent) -> pb.KvCacheEvent:
        message = pb.KvCacheEvent(event_id=self._event_id)
        if isinstance(event, BlockStored):
            stored = message.stored
            size = event.block_size
            for i, block_hash in enumerate(event.block_hashes):
                block = stored.blocks.add(
                    block_hash=signed64(block_hash),
                    token_ids=event.token_ids[i * size : (i + 1) * size],
                    block_size=size,
                )
                if event.lora_id is not None:
                    block.lora_id = event.lora_id
            if event.parent_block_hash is not None:
                stored.parent_block_hash = signed64(event.parent_block_hash)
            if event.lora_name is not None:
                stored.lora_name = event.lora_name
            if event.medium != MEDIUM:  # the CPU offloading tier's: its medium and tier
                stored.medium = event.medium
                stored.tier = pb.KV_CACHE_TIER_HOST
        elif isinstance(event, BlockRemoved):
            removed = message.removed
            removed.block_hashes.extend(signed64(h) for h in event.block_hashes)
            if event.medium != MEDIUM:
                removed.medium = event.medium
                removed.tier = pb.KV_CACHE_TIER_HOST
        elif isinstance(event, AllBlocksCleared):
            message.cleared.SetInParent()
        return message


def tokenizer_archive(folder: Path) -> bytes:
    """The tokenizer files of a model folder, zipped (files it lacks are left out)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in TOKENIZER_FILES:
            path = folder / name
            if path.is_file():
                archive.write(path, name)
    return buffer.getvalue()
