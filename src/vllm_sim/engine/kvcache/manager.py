"""The KV cache's settings and the prompt's block hashes; the engine holds and releases
blocks on the cache itself (`cache.BlockCache`), once per sequence.

Block accounting is always on, as in vLLM; prefix caching (on by default) makes prompts
share and find their full blocks. Hashes are computed once per prompt (shared by its `n`
copies) when the request is submitted; the cache-hit threshold (llm-d's, with
--enable-kvcache only) is decided right after the lookup, so a refused request has still
stored its blocks, as on a real prefix cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.hashing import block_hashes, mm_block_extras

_RECENT_PROMPTS = 4096


class KvCacheManager:
    def __init__(
        self,
        cache: BlockCache,
        hash_seed: str,
        global_threshold: float,
        prefix_caching: bool = True,
        thresholds: bool = True,
    ) -> None:
        self.cache = cache
        self.hash_seed = hash_seed
        self.global_threshold = global_threshold
        self.prefix_caching = prefix_caching
        self.thresholds = thresholds  # the cache-hit threshold applies (--enable-kvcache)
        # Prompts repeat (that is what a prefix cache is for): remember recent chains.
        self._recent: OrderedDict[tuple[str, tuple[int, ...]], list[int]] = OrderedDict()

    def hashes(
        self,
        token_ids: Sequence[int],
        model: str,
        features: Mapping[str, Mapping[str, Sequence[object]]] | None = None,
    ) -> Sequence[int]:
        """The prompt's full-block hashes (none without prefix caching); 400 if the prompt
        could never fit in the cache."""
        bs = self.cache.block_size
        needed = self.cache.blocks_for(len(token_ids))
        if needed > self.cache.capacity:
            raise EngineError(
                Refusal.INVALID,
                f"the prompt needs {needed} KV-cache blocks of {bs} tokens, more than the "
                f"whole cache holds ({self.cache.capacity} blocks, --kv-cache-size)",
            )
        count = len(token_ids) // bs
        if not count or not self.prefix_caching:
            return ()
        if not features:
            key = (model, tuple(token_ids[: count * bs]))
            hashes = self._recent.get(key)
            if hashes is None:
                hashes = self._chain(token_ids, model, count, None)
                self._recent[key] = hashes
                if len(self._recent) > _RECENT_PROMPTS:
                    self._recent.popitem(last=False)
            else:
                self._recent.move_to_end(key)
        else:
            hashes = self._chain(token_ids, model, count, features)
        return hashes

    def _chain(
        self,
        token_ids: Sequence[int],
        model: str,
        count: int,
        features: Mapping[str, Mapping[str, Sequence[object]]] | None,
    ) -> list[int]:
        bs = self.cache.block_size
        extras = None
        if features and features.get("mm_hashes"):
            extras = mm_block_extras(
                count,
                bs,
                features["mm_hashes"],  # type: ignore[arg-type]
                features.get("mm_placeholders", {}),  # type: ignore[arg-type]
            )
        return block_hashes(token_ids, bs, model, self.hash_seed, extras)

    def threshold(self, requested: float | None) -> float | None:
        """The hit-rate threshold in force: the request's if valid, else the global one."""
        if not self.thresholds:
            return None
        if requested is not None and 0.0 <= requested <= 1.0:
            return requested
        return self.global_threshold if self.global_threshold > 0 else None
