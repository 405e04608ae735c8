"""Routers in front of a fleet of simulated instances: which one takes the next request.

- round-robin: in turn.
- least-requests: the fewest running plus waiting requests.
- least-kv-usage: the smallest share of KV blocks held.
- prefix-aware: the most of the prompt already in an instance's prefix cache, weighed
  with its queue and KV usage as a precise prefix-cache scorer does: each instance's
  prompt blocks are looked up by the instance's own block hashes (those its KV events
  announce), so the score is what that cache really holds, not an estimate.

Ties go to the instance after the last one chosen, so equal instances share the load.

- pd: prefill/decode disaggregation (the replay's `prefill_instances` split the fleet): a
  request is prefilled on the prefill instance with the fewest requests, which hands its
  KV over, then decoded on the decode instance with the fewest, as llm-d's P/D pairs do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from vllm_sim.engine.core import Engine

RouterName = Literal["round-robin", "least-requests", "least-kv-usage", "prefix-aware", "pd"]
ROUTERS: tuple[RouterName, ...] = (
    "round-robin",
    "least-requests",
    "least-kv-usage",
    "prefix-aware",
    "pd",
)

# The prefix-aware score's weights: cache hits first, then queue and KV headroom.
PREFIX_WEIGHT, QUEUE_WEIGHT, KV_WEIGHT = 3.0, 2.0, 2.0


class Router:
    """Picks among `engines` (a pool: its indices are the pool's, 0 first)."""

    def __init__(self, name: RouterName, engines: Sequence[Engine]) -> None:
        self.name = name
        self._engines = list(engines)
        self._last = -1

    def choose(self, token_ids: Sequence[int], model: str) -> int:
        """The index of the instance that takes a prompt of `token_ids` for `model`."""
        count = len(self._engines)
        if count == 1:
            return 0
        if self.name == "round-robin":
            self._last = (self._last + 1) % count
            return self._last
        scores = self._scores(token_ids, model)
        start = self._last + 1
        best = max(range(count), key=lambda i: (scores[i], -((i - start) % count)))
        self._last = best
        return best

    def _scores(self, token_ids: Sequence[int], model: str) -> list[float]:
        """Higher is better."""
        engines = self._engines
        if self.name in ("least-requests", "pd"):
            return [-float(e.num_running + e.num_waiting) for e in engines]
        if self.name == "least-kv-usage":
            return [-_kv_usage(e) for e in engines]
        queues = [e.num_running + e.num_waiting for e in engines]
        low, high = min(queues), max(queues)
        spread = high - low
        return [
            PREFIX_WEIGHT * cached_share(e, token_ids, model)
            + QUEUE_WEIGHT * ((high - q) / spread if spread else 1.0)
            + KV_WEIGHT * (1.0 - _kv_usage(e))
            for e, q in zip(engines, queues, strict=True)
        ]


def cached_share(engine: Engine, token_ids: Sequence[int], model: str) -> float:
    """The share of the prompt's full blocks that lead it in `engine`'s prefix cache."""
    kv = engine.kv
    if kv is None or not kv.prefix_caching:
        return 0.0
    hashes = kv.hashes(token_ids, model)
    if not hashes:
        return 0.0
    cache = kv.cache
    used, unused = cache.used, cache.unused
    found = 0
    for block_hash in hashes:
        key = (block_hash, model)
        if key not in used and key not in unused:
            break
        found += 1
    return found / len(hashes)


def _kv_usage(engine: Engine) -> float:
    kv = engine.kv
    return 0.0 if kv is None else kv.cache.usage
