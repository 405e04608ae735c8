"""The engine's lifecycle beside its scheduling: sleep and wake, pause and resume, and
stopping what is in flight when the server stops.

vLLM's /sleep frees the weights and the KV cache; the simulator has neither to free, so a
sleeping engine clears its prefix cache, keeps it off and refuses every request until
woken. vLLM's /pause stops scheduling in one of three modes (PauseMode). The lifecycle
holds these states; the scheduler core reads them at admission, and the timing strategy
stands still while a pause keeps its requests.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Literal, Protocol

from vllm_sim.engine.errors import EngineError, Refusal

if TYPE_CHECKING:
    from vllm_sim.engine.kvcache.manager import KvCacheManager
    from vllm_sim.engine.timing.strategy import TimingStrategy

# How POST /pause treats the requests in flight (vLLM's modes): `abort` ends them at once,
# `wait` lets the running ones finish, `keep` freezes them until resume.
PauseMode = Literal["abort", "wait", "keep"]


class Asleep(enum.Enum):
    """What a sleeping model has freed (vLLM's sleep levels: weights and the KV cache)."""

    WEIGHTS = "weights"
    KV_CACHE = "kv_cache"


class InFlight(Protocol):
    """What the lifecycle asks of the scheduler core."""

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    def admit(self) -> None:
        """Lets waiting sequences start, in a new turn of the loop."""
        ...

    def end_in_flight(self) -> None:
        """Ends every queued and running sequence now, as finished with reason `abort`."""
        ...

    def fail_in_flight(self, error: EngineError) -> int:
        """Fails every queued and running request with `error`; how many there were."""
        ...


class Lifecycle:
    """Whether the engine sleeps or is paused, and the actions that change it."""

    def __init__(self, core: InFlight, timing: TimingStrategy, kv: KvCacheManager | None) -> None:
        self._core = core
        self._timing = timing
        self._kv = kv
        self.asleep: frozenset[Asleep] = frozenset()
        self.sleep_level = 0  # vLLM's level of the last /sleep (1 or 2); 0 while awake
        self.paused: PauseMode | None = None  # set by pause(), cleared by resume()

    @property
    def open_requests(self) -> int:
        """Sequences still queued or running (the shutdown drain waits for 0)."""
        return self._core.num_waiting + self._core.num_running

    def sleep(self, level: int = 1) -> None:
        """Frees the weights and the KV cache: the prefix cache is cleared and stays off,
        and every request is refused until woken. `level` is only reported (metrics)."""
        self.asleep = frozenset(Asleep)
        self.sleep_level = level
        if self._kv is not None:
            self._kv.cache.clear()
            self._kv.cache.disabled = True

    def wake(self, parts: frozenset[Asleep]) -> None:
        """Brings `parts` back; the prefix cache works again once the KV cache is awake."""
        self.asleep -= parts
        if not self.asleep:
            self.sleep_level = 0
        if self._kv is not None and Asleep.KV_CACHE not in self.asleep:
            self._kv.cache.disabled = False

    def pause(self, mode: PauseMode) -> None:
        """Stops scheduling, as vLLM's /pause: no queued request starts until resume(), and
        new requests queue. `abort` ends every queued and running request now, as finished
        with reason `abort` and what it had released; `wait` lets the running ones finish;
        `keep` freezes them, their timing included."""
        self.paused = mode
        if mode == "keep":
            self._timing.freeze()
            return
        self._timing.thaw()  # a pause that kept requests frozen now lets them run on
        if mode == "abort":
            self._core.end_in_flight()

    def resume(self) -> None:
        """Ends a pause: frozen requests run on from where they stopped, the queue starts."""
        self.paused = None
        self._timing.thaw()
        self._core.admit()

    def stop_all(self, message: str) -> int:
        """Fails every queued and running request, for a server that stops before they end:
        each answers (an error event and [DONE], or a 503) instead of being cut off. Returns
        how many requests were stopped."""
        return self._core.fail_in_flight(EngineError(Refusal.STOPPING, message))
