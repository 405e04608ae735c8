"""A read-only view of one engine's state: what metrics, the gRPC service and the admin and
vLLM routes show of it.

Readers get the figures, never the parts that hold them, so nothing outside the engine
changes its state by reading; what changes it (submit, sleep, pause, reset the prefix
cache, load an adapter, reconfigure) stays the engine's own methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from vllm_sim.engine.content import ECHO
from vllm_sim.engine.sequence import SeqState

if TYPE_CHECKING:
    from vllm_sim.engine.core import Engine, EngineLimits
    from vllm_sim.engine.lifecycle import Asleep, PauseMode
    from vllm_sim.engine.sequence import Sequence
    from vllm_sim.schemagen import SynthesisSettings


@dataclass(frozen=True, slots=True)
class KvFigures:
    """The KV cache's occupancy at one moment."""

    held_blocks: int  # blocks running sequences hold
    capacity: int  # blocks the cache has
    block_size: int  # tokens a block holds
    usage: float  # the share of the capacity held, 0 to 1


class EngineView:
    """What an engine shows of itself, read when asked (see the module doc)."""

    __slots__ = ("_engine", "_loras", "_queue")

    def __init__(self, engine: Engine, queue: Iterable[Sequence]) -> None:
        self._engine = engine
        self._queue = queue  # the engine's waiting queue, which it changes only in place
        self._loras = MappingProxyType(engine.loras.paths)

    @property
    def num_running(self) -> int:
        return self._engine.num_running

    @property
    def num_waiting(self) -> int:
        return self._engine.num_waiting

    @property
    def open_requests(self) -> int:
        """Sequences still queued or running (the shutdown drain waits for 0)."""
        return self._engine.lifecycle.open_requests

    @property
    def limits(self) -> EngineLimits:
        return self._engine.limits

    @property
    def paused(self) -> PauseMode | None:
        """The mode of the pause in force, if any."""
        return self._engine.lifecycle.paused

    @property
    def asleep(self) -> frozenset[Asleep]:
        """What the sleeping model has freed; empty while awake."""
        return self._engine.lifecycle.asleep

    @property
    def sleep_level(self) -> int:
        """vLLM's level of the last /sleep (1 or 2); 0 while awake."""
        return self._engine.lifecycle.sleep_level

    def waiting_by_reason(self) -> tuple[int, int]:
        """(capacity, deferred): vLLM's split of the waiting sequences. One whose LoRA adapter
        cannot be loaded now (--max-loras reached) is deferred; every other one waits for a
        running slot or KV blocks. It walks the queue: for scrapes, not the request path."""
        deferred = 0
        slots = self._engine.lora_slots
        for seq in self._queue:
            lora = seq.request.lora
            if seq.state is SeqState.WAITING and lora is not None and not slots.can_run(lora):
                deferred += 1
        return self.num_waiting - deferred, deferred

    @property
    def kv_usage(self) -> float:
        """The share of the KV cache held by running sequences (0 with no cache)."""
        kv = self._engine.kv
        return 0.0 if kv is None else kv.cache.usage

    def kv_figures(self) -> KvFigures | None:
        """The KV cache's occupancy now; None for an engine without one."""
        kv = self._engine.kv
        if kv is None:
            return None
        cache = kv.cache
        return KvFigures(cache.held_blocks, cache.capacity, cache.block_size, cache.usage)

    @property
    def loras(self) -> Mapping[str, str]:
        """The registered LoRA adapters: name -> path."""
        return self._loras

    @property
    def echoes(self) -> bool:
        """Whether answers echo their prompt (--mode echo)."""
        return self._engine.content.mode == ECHO

    @property
    def synthesis(self) -> SynthesisSettings:
        """How generated tool-call arguments and JSON are synthesized (what a request's
        schemas are checked against before it is admitted)."""
        return self._engine.content.synthesis
