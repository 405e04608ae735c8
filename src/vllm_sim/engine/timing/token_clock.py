"""The token clock: each running sequence's tokens at their own sampled deadlines.

A started sequence's first token is due after its sampled TTFT, each later one after a
sampled inter-token delay. A single timer serves every running sequence: it wakes at the
earliest token deadline and releases every token that is due, so that delays never
accumulate scheduling lag and a thousand streams cost one timer, not a thousand.
Deadlines are absolute, so a late timer shows in one token's release and never adds up
into the pace. A token is released only once its sequence holds the KV blocks for
everything before it (the scheduler core's `grow`); admission happens at once.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING

from vllm_sim.engine.sequence import SeqState
from vllm_sim.engine.timing.release import release_token
from vllm_sim.engine.turn import WORK_PER_TURN

if TYPE_CHECKING:
    from vllm_sim.engine.clock import Scheduler, TimerHandle
    from vllm_sim.engine.latency import LatencyModel
    from vllm_sim.engine.sequence import RequestStream, Sequence
    from vllm_sim.engine.timing.strategy import SchedulerCore

# A token whose deadline is this close is released now rather than after another timer
# round trip: event-loop timers have millisecond granularity.
_EARLY = 0.0005
_NEVER = float("inf")


class TokenClock:
    """A TimingStrategy of per-sequence token deadlines on one timer (see the module doc)."""

    _core: SchedulerCore
    _scheduler: Scheduler

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Sequence]] = []
        self._timer: TimerHandle | None = None
        self._timer_when = 0.0
        self._ticking = False
        self._step_tokens = 0  # tokens released inline by the sequences one admission started
        self._frozen_at: float | None = None  # when a pause that keeps requests stopped it

    def attach(self, core: SchedulerCore) -> None:
        self._core = core
        self._scheduler = core.scheduler
        self._clock = core.scheduler.now

    # ----------------------------------------------------------------- strategy hooks
    def kick(self) -> None:
        """Admission happens at once; the tokens the sequences it started released at once
        (no TTFT to wait for) make one engine step."""
        core = self._core
        if core.admitting:
            return  # a sequence finished inline while admitting: that loop continues
        try:
            core.admit_waiting()
        finally:
            if self._step_tokens:
                tokens, self._step_tokens = self._step_tokens, 0
                core.observer.engine_step(tokens)

    def prefill(self, seq: Sequence, now: float) -> None:
        """The first token comes after the sampled TTFT, which counts the prefix-cache hits
        looked up at start, and after the load of the blocks found in the CPU tier."""
        seq.ttft = seq.kv_load + seq.latency.time_to_first_token(
            seq.prompt_tokens, seq.cached_tokens, seq.request.do_remote_prefill, self._core.load()
        )
        self._advance(seq, now + seq.ttft, now)
        if seq.t_first_token is not None:  # released at once: part of this admission's step
            self._step_tokens += len(seq.prompt.token_ids) + seq.emitted

    def recompute(self, seq: Sequence, computed: int, cached: int, now: float) -> None:
        delay = seq.kv_load + seq.latency.time_to_first_token(
            computed, cached, False, self._core.load()
        )
        self._advance(seq, now + delay, now)

    def preempted(self, seq: Sequence) -> None:
        heap = self._heap
        if any(entry[2] is seq for entry in heap):
            heap[:] = [entry for entry in heap if entry[2] is not seq]
            heapq.heapify(heap)

    def freeze(self) -> None:
        """The timer is cancelled, and nothing else arms it while frozen: only admission
        (off while paused) and ticks (gone) do."""
        if self._frozen_at is not None:
            return
        self._frozen_at = self._clock()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def thaw(self) -> None:
        frozen_at = self._frozen_at
        if frozen_at is None:
            return
        self._frozen_at = None
        shift = self._clock() - frozen_at
        heap = self._heap
        for i, (deadline, uid, seq) in enumerate(heap):  # a constant shift keeps heap order
            heap[i] = (deadline + shift, uid, seq)
            seq.deadline = deadline + shift
        if heap:
            self._timer_when = heap[0][0]
            self._timer = self._scheduler.call_at(self._timer_when, self._tick)

    # ----------------------------------------------------------------- the clock
    def _advance(self, seq: Sequence, deadline: float, now: float) -> None:
        """Releases every token of `seq` due by `now`; schedules the next one."""
        core = self._core
        total = len(seq.output_ids)
        horizon = now + _EARLY
        while deadline <= horizon:
            if seq.emitted == 0 and seq.t_first_token is None:
                seq.t_first_token = seq.t_last_token = now
                core.observer.first_token(seq)
            if seq.emitted >= total:
                core.finish(seq, now)
                return
            latency = seq.latency
            if latency.settings.itl == 0:
                if total > seq.kv_limit and not core.grow(seq, total - 1, now):
                    return
                self._release_remaining(seq, total, now)
                deadline += _tail(seq, latency)
                continue
            if not self._release(seq, now):
                return
            if seq.emitted >= total:
                deadline += _tail(seq, latency)
                continue
            if seq.emitted in seq.call_starts:
                continue  # a new tool call starts with no decode step before it
            delay = latency.inter_token_latency(core.load())
            seq.itl_delays += delay
            deadline += delay
        self._schedule(seq, deadline)

    def _release(self, seq: Sequence, now: float) -> bool:
        """Releases the next token of `seq` once its KV has room for it; False if the
        sequence stopped running instead (preempted, or ended at what the cache holds)."""
        core = self._core
        if seq.emitted >= seq.kv_limit and not core.grow(seq, seq.emitted, now):
            return False
        release_token(seq, now, core.observer)
        return True

    def _release_remaining(self, seq: Sequence, total: int, now: float) -> None:
        """No decode delay: every token left is released at `now`, each gap still a step
        (the first measured since the previous release, the rest nothing)."""
        observer = self._core.observer
        steps = total - max(seq.emitted, 1)
        if seq.call_starts:  # a call's first token follows without a step
            steps -= sum(1 for i in seq.call_starts if i >= max(seq.emitted, 1))
        if steps > 0 and seq.emitted > 0:
            observer.inter_tokens(seq, now - seq.t_last_token, 1)
            steps -= 1
        if steps > 0:
            observer.inter_tokens(seq, 0.0, steps)
        seq.emitted = total
        seq.t_last_token = now

    def _schedule(self, seq: Sequence, deadline: float) -> None:
        if not deadline < _NEVER:  # NaN or infinite: the heap and the timer need an order
            raise ValueError(f"token deadline {deadline} is not a finite time")
        seq.deadline = deadline
        heapq.heappush(self._heap, (deadline, seq.uid, seq))
        if self._ticking:
            return  # _tick arms the timer for the earliest deadline when it is done
        if self._timer is None or deadline < self._timer_when:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._scheduler.call_at(deadline, self._tick)
            self._timer_when = deadline

    def _tick(self) -> None:
        self._timer = None
        self._ticking = True
        core = self._core
        heap = self._heap
        now = self._clock()
        horizon = now + _EARLY
        touched: list[RequestStream] = []
        released = 0  # this tick's tokens: one engine step
        turn = core.turn
        turn.begin()
        try:
            while heap and heap[0][0] <= horizon and turn.work < WORK_PER_TURN:
                if time.perf_counter() >= turn.ends:
                    break
                deadline, _, seq = heapq.heappop(heap)
                if seq.state is not SeqState.RUNNING:
                    continue
                before = seq.emitted
                prefilling = seq.t_first_token is None
                try:
                    self._advance(seq, deadline, now)
                except Exception:  # one sequence step: a bug fails its request, not the clock
                    core.crash(seq, "releasing tokens")
                    continue
                if prefilling and seq.t_first_token is not None:
                    released += seq.prompt_tokens  # its prefill ended in this step
                if seq.emitted != before:
                    released += seq.emitted - before
                    touched.append(seq.stream)
        finally:
            self._ticking = False
            if heap:  # armed even if the loop broke: the clock must keep running for others
                self._timer_when = heap[0][0]
                self._timer = self._scheduler.call_at(self._timer_when, self._tick)
        if released:
            core.observer.engine_step(released)
        for stream in touched:
            stream.notify()


def _tail(seq: Sequence, latency: LatencyModel) -> float:
    """Time between the last token and the end: an omni model's image, if any."""
    return latency.time_to_generate_image() if seq.request.with_image else 0.0
