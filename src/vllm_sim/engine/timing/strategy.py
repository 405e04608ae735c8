"""When a running sequence's tokens come: the timing strategy the scheduler core consults.

The core (engine/core.py) decides who runs: admission, the waiting queue, running slots,
KV blocks and preemption. A timing strategy decides when: when queued sequences are
admitted, when a started sequence's first token and each later one are released, and what
a pause that keeps its requests stands still. The core calls the strategy's hooks at each
scheduling event, never per token; the strategy calls back into the core through
SchedulerCore, the part of the engine it may use.

Two strategies: the token clock (token_clock.py), each sequence's tokens at deadlines
sampled from the latency settings, and the step loop (steps.py), vLLM V1's batch steps
timed by a performance model; speculative.py has each in a form that decodes
speculatively.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from vllm_sim.engine.clock import Scheduler
    from vllm_sim.engine.core import EngineLimits
    from vllm_sim.engine.latency import LatencyModel
    from vllm_sim.engine.lifecycle import Lifecycle
    from vllm_sim.engine.observer import EngineObserver
    from vllm_sim.engine.sequence import Sequence
    from vllm_sim.engine.turn import Turn


class SchedulerCore(Protocol):
    """What a timing strategy may use of the engine it times."""

    @property
    def scheduler(self) -> Scheduler:
        """The engine's clock and timers."""
        ...

    @property
    def observer(self) -> EngineObserver:
        """Read at each event, never kept: it may be replaced while the engine runs."""
        ...

    @property
    def limits(self) -> EngineLimits: ...

    @property
    def latency(self) -> LatencyModel:
        """The latency model new work is timed by (its settings' factor scales steps)."""
        ...

    @property
    def turn(self) -> Turn:
        """The engine's share of this turn of the event loop."""
        ...

    @property
    def running(self) -> Mapping[int, Sequence]:
        """The running sequences by uid, oldest admission first: one mapping for the
        engine's whole life, changed in place, so a strategy may keep it."""
        ...

    @property
    def num_running(self) -> int: ...

    def next_waiting(self) -> Sequence | None:
        """The oldest sequence waiting to start, left in the queue."""
        ...

    admitting: bool  # True while admit_waiting runs: a sequence that ends inline re-enters it

    @property
    def lifecycle(self) -> Lifecycle:
        """Whether the engine is paused (nothing new starts then)."""
        ...

    def load(self) -> int:
        """The running count the latency model's load factor sees."""
        ...

    def admit_waiting(self) -> None:
        """Starts queued sequences in free slots now, oldest first, as many as this turn
        of the loop allows (the rest on the next turn)."""
        ...

    def start_next(self) -> Sequence | None:
        """Starts the oldest waiting sequence that may start now; None if none may."""
        ...

    def grow(self, seq: Sequence, outputs: int, now: float) -> bool:
        """Gives `seq` the KV blocks for its prompt and `outputs` output tokens, preempting
        newer sequences if need be; False if `seq` stopped running instead."""
        ...

    def finish(self, seq: Sequence, now: float) -> None:
        """`seq` released its last token: its slot and blocks go to the next."""
        ...

    def crash(self, seq: Sequence, stage: str) -> None:
        """A bug while `stage` (logged): the request of `seq` fails, the engine runs on."""
        ...


class TimingStrategy(Protocol):
    """The hooks the scheduler core calls, each at a scheduling event."""

    def attach(self, core: SchedulerCore) -> None:
        """Binds the strategy to the engine it times; the engine calls it once, when built."""
        ...

    def kick(self) -> None:
        """Waiting sequences may start (a request arrived, a slot or blocks were freed, a
        pause ended): admit them now, or at the next step."""
        ...

    def prefill(self, seq: Sequence, now: float) -> None:
        """`seq` took a running slot at `now`, its prefix-cache hits looked up: time its
        prefill, after which its first token comes."""
        ...

    def recompute(self, seq: Sequence, computed: int, cached: int, now: float) -> None:
        """A preempted `seq` runs again at `now`: time the prefill that recomputes its
        `computed` tokens, of which `cached` are prefix-cache hits; then it goes on where it
        was."""
        ...

    def preempted(self, seq: Sequence) -> None:
        """`seq` lost its slot and KV blocks and waits to be recomputed: nothing of it may
        be released until it runs again."""
        ...

    def freeze(self) -> None:
        """No token is released until thaw() (a pause that keeps its requests)."""
        ...

    def thaw(self) -> None:
        """Time runs again: what was pending is due as much later as it stood still."""
        ...
