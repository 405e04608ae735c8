"""An engine observer that stalls the process after each engine step, between the release
of the step's tokens and their writes: a process that cannot keep up, made to order.

The engine calls `engine_step` once a tick (or step) has released its tokens and before it
wakes their writers, so whatever `stall` does there (block the thread, or move a virtual
clock on) the writes of that step come that much after their release. Every other event
goes to the observer it wraps (the server's metrics recorder).
"""

from __future__ import annotations

from collections.abc import Callable

from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest
from vllm_sim.engine.sequence import Sequence


class StallingObserver(EngineObserver):
    def __init__(self, inner: EngineObserver, stall: Callable[[int], None]) -> None:
        self.inner = inner
        self.stall = stall  # given each step's released tokens
        self.steps = 0

    def engine_step(self, tokens: int) -> None:
        self.inner.engine_step(tokens)
        self.steps += 1
        self.stall(tokens)

    def sequence_queued(self, seq: Sequence) -> None:
        self.inner.sequence_queued(seq)

    def sequence_started(self, seq: Sequence) -> None:
        self.inner.sequence_started(seq)

    def first_token(self, seq: Sequence) -> None:
        self.inner.first_token(seq)

    def inter_tokens(self, seq: Sequence, delay: float, count: int) -> None:
        self.inner.inter_tokens(seq, delay, count)

    def output_written(
        self, seq: Sequence, start: int, end: int, finished: bool, now: float
    ) -> None:
        self.inner.output_written(seq, start, end, finished, now)

    def drafts_verified(self, seq: Sequence, drafts: int, accepted: int) -> None:
        self.inner.drafts_verified(seq, drafts, accepted)

    def sequence_finished(self, seq: Sequence) -> None:
        self.inner.sequence_finished(seq)

    def sequence_aborted(self, seq: Sequence) -> None:
        self.inner.sequence_aborted(seq)

    def sequence_failed(self, seq: Sequence) -> None:
        self.inner.sequence_failed(seq)

    def prefix_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        self.inner.prefix_lookup(queried_tokens, hit_tokens)

    def external_prefix_lookup(self, seq: Sequence, queried_tokens: int, hit_tokens: int) -> None:
        self.inner.external_prefix_lookup(seq, queried_tokens, hit_tokens)

    def admission_rejected(self, request: GenerationRequest) -> None:
        self.inner.admission_rejected(request)

    def sequence_preempted(self, seq: Sequence) -> None:
        self.inner.sequence_preempted(seq)
